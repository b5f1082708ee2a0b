//! Apache Kafka 4.4's own share-group tool (`kafka-share-groups.sh`, the class
//! `org.apache.kafka.tools.consumer.group.ShareGroupCommand`) against a broker started here:
//! it lists share groups, describes them (offsets, members, state), refuses to reset the offsets
//! of a group with a member, and resets and deletes the offsets of an empty group.
//!
//! How: a `lockstep` broker (`--shards 2`) on a free loopback port in a temporary directory; a
//! topic of two partitions with 100 records and the group config
//! `share.auto.offset.reset=earliest` (`tests/clients/python/share_consume.py --scenario
//! produce`); one confluent-kafka ShareConsumer held in the group
//! (`tests/clients/python/share_hold.py`) while the group must be Stable; then the tool, whose
//! output (tables of whitespace-separated columns) is asserted on row by row.
//!
//! With `LOCKSTEP_INTEROP_TARGET=kafka` the same test runs against the Kafka 4.4 reference broker
//! (`tools/kafka-reference.sh run`), which is how its expectations were checked. Differences that
//! remain: the coordinator id is 0 (Kafka's reference broker is 1). The LAG column comes from
//! DescribeShareGroupOffsets v1 (KIP-1226): the records from the start offset to the high
//! watermark whose delivery is not complete.
//!
//! Needs `tools/install-test-deps.sh` (the Python client, and Apache Kafka 4.4 for the tool);
//! when either is missing the test fails and says how to install it.

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
const GROUP: &str = "admin-tool-group";
const TOPIC: &str = "admin-tool-topic";

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
    _dir: tempfile::TempDir,
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
        .prefix("lockstep-share-admin-")
        .tempdir()
        .expect("temporary directory");
    let port = free_port();
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
        _dir: dir,
    };
    rx.recv_timeout(BROKER_START_TIMEOUT)
        .unwrap_or_else(|_| panic!("broker not ready within {BROKER_START_TIMEOUT:?}"));
    broker
}

/// Runs the share-group tool; returns its stdout and stderr without log lines. (Its exit
/// status says nothing: the tool reports errors on its output and exits 0 either way.)
fn tool(port: u16, args: &[&str]) -> String {
    let mut cmd = Command::new(Path::new(ROOT).join("tools/kafka-reference.sh"));
    let Output { stdout, stderr, .. } = die_with_parent(&mut cmd)
        .arg("class")
        .arg("org.apache.kafka.tools.consumer.group.ShareGroupCommand")
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
    eprintln!("$ kafka-share-groups {}\n{text}", args.join(" "));
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

#[test]
fn kafka_share_groups_tool_lists_describes_resets_and_deletes() {
    check_deps();
    let broker = start_broker();
    let port = broker.port;
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
            "2",
            "--count",
            "100",
        ])
        .status()
        .expect("run share_consume.py");
    assert!(produced.success(), "producing the records failed");

    // A group that only has configs does not exist yet (as in Kafka: configs do not create it).
    let out = tool(port, &["--describe", "--group", GROUP]);
    assert!(out.contains(&format!("Group {GROUP} not found.")), "{out}");

    // A group with a member: Stable; its member is described; offsets cannot be reset.
    let holder = Holder::start(port);
    let out = tool(port, &["--list"]);
    assert!(
        rows(&out).iter().any(|r| r == &vec![GROUP.to_string()]),
        "{out}"
    );
    let out = tool(port, &["--list", "--state"]);
    assert_eq!(row(&out, &[GROUP]), vec![GROUP, "Stable"]);
    let out = tool(port, &["--describe", "--group", GROUP, "--members"]);
    let member = row(&out, &[GROUP]);
    // GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS ASSIGNMENT
    assert_eq!(member.len(), 6, "{out}");
    assert_eq!(member[2], "/127.0.0.1");
    assert_eq!(member[3], "lockstep-share-hold");
    assert_eq!(member[4], "2");
    assert_eq!(member[5], format!("{TOPIC}:0,1"));
    let out = tool(
        port,
        &["--describe", "--group", GROUP, "--state", "--verbose"],
    );
    // GROUP COORDINATOR (ID) STATE GROUP-EPOCH ASSIGNMENT-EPOCH #MEMBERS
    let state = row(&out, &[GROUP]);
    assert_eq!(state[3], "Stable", "{out}");
    assert!(state[4].parse::<i32>().is_ok_and(|e| e > 0), "{out}");
    assert_eq!(state[6], "1", "{out}");
    let out = tool(
        port,
        &[
            "--reset-offsets",
            "--to-earliest",
            "--group",
            GROUP,
            "--topic",
            TOPIC,
            "--execute",
        ],
    );
    assert!(
        out.contains(&format!("Share group '{GROUP}' is not empty.")),
        "{out}"
    );
    let out = tool(
        port,
        &["--delete-offsets", "--group", GROUP, "--topic", TOPIC],
    );
    assert!(out.contains("The group is not empty."), "{out}");

    // The member leaves: Empty, with a start offset per partition.
    holder.release();
    wait_for_state(port, "Empty");
    let out = tool(port, &["--describe", "--group", GROUP]);
    for partition in ["0", "1"] {
        // GROUP TOPIC PARTITION START-OFFSET LAG
        let r = row(&out, &[GROUP, TOPIC, partition]);
        assert!(
            r[3].parse::<i64>().is_ok_and(|o| (0..=50).contains(&o)),
            "{out}"
        );
        // 50 records per partition; the lag counts those from the start offset on whose
        // delivery is not complete. (Kafka 4.4 shows START-OFFSET 0 and LAG 0 here: its start
        // offset has not moved past the acknowledged records yet, which the lag leaves out.)
        let start: i64 = r[3].parse().unwrap();
        assert!(
            r[4].parse::<i64>()
                .is_ok_and(|lag| (0..=50 - start).contains(&lag)),
            "LAG {}: {out}",
            r[4]
        );
    }
    let out = tool(port, &["--describe", "--group", GROUP, "--members"]);
    assert!(
        out.contains(&format!("Share group '{GROUP}' has no active members.")),
        "{out}"
    );

    // Reset to the earliest offset, then delete the offsets.
    let out = tool(
        port,
        &[
            "--reset-offsets",
            "--to-earliest",
            "--group",
            GROUP,
            "--topic",
            TOPIC,
            "--execute",
        ],
    );
    for partition in ["0", "1"] {
        assert_eq!(row(&out, &[GROUP, TOPIC, partition])[3], "0", "{out}");
    }
    let out = tool(port, &["--describe", "--group", GROUP]);
    for partition in ["0", "1"] {
        let r = row(&out, &[GROUP, TOPIC, partition]);
        assert_eq!(r[3], "0", "{out}");
        // From offset 0 nothing is delivered: the whole partition is lag.
        assert_eq!(r[4], "50", "{out}");
    }
    let out = tool(
        port,
        &["--delete-offsets", "--group", GROUP, "--topic", TOPIC],
    );
    assert_eq!(row(&out, &[TOPIC]), vec![TOPIC, "Successful"]);
    let out = tool(port, &["--describe", "--group", GROUP]);
    assert!(
        out.contains(&format!("Share group '{GROUP}' has no offset information.")),
        "{out}"
    );
    let out = tool(
        port,
        &[
            "--delete-offsets",
            "--group",
            GROUP,
            "--topic",
            "no-such-topic",
        ],
    );
    assert!(
        out.contains("Error: This server does not host this topic-partition."),
        "{out}"
    );

    // Unknown groups.
    let out = tool(port, &["--describe", "--group", "no-such-group"]);
    assert!(out.contains("Group no-such-group not found."), "{out}");
    let out = tool(
        port,
        &[
            "--delete-offsets",
            "--group",
            "no-such-group",
            "--topic",
            TOPIC,
        ],
    );
    assert!(out.contains("Group no-such-group not found."), "{out}");
}
