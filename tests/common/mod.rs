//! Scaffolding shared by the tests that run Apache Kafka 4.4's own tools against a broker
//! started here (`tests/admin_tools.rs`, `tests/share_admin_tool.rs`): the test dependencies
//! and their install hint, a `lockstep` broker (`--shards 2`, or the Kafka 4.4 reference with
//! `LOCKSTEP_INTEROP_TARGET=kafka`) on a free loopback port that can be SIGKILLed and
//! restarted, the Kafka tool runner and its output parsing, and a share consumer held in a
//! group (`tests/clients/python/share_hold.py`).
//!
//! [`process`]: a `lockstep` child process with its logs, exit status and restarts, for the tests
//! that drive the binary itself.
//!
//! [`sim`]: the deterministic executor and `ShardIo` the simulations run the production shard
//! core on (`tests/share_txn_sim.rs`, `tests/share_producer_txn_sim.rs`).
//!
//! Included with `mod common;`; each test uses only part of it.
#![allow(dead_code)]

/// Arguments every test broker gets: classic groups assign their first member at once
/// (`group.initial.rebalance.delay.ms=0`, as Kafka's test configurations and the reference
/// broker of `tools/kafka-reference.sh` do), so scenarios run alike on both brokers.
pub const LOCKSTEP_TEST_ARGS: [&str; 2] = ["--override", "group.initial.rebalance.delay.ms=0"];

pub mod process;
pub mod sim;
pub mod wire;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");
pub const INSTALL_HINT: &str = "run tools/install-test-deps.sh (it installs the Python client and \
     Apache Kafka 4.4, whose kafka-share-groups tool this test runs, into target/test-deps/)";
pub const BROKER_START_TIMEOUT: Duration = Duration::from_secs(180);
pub const HOLD_TIMEOUT: Duration = Duration::from_secs(120);

pub fn deps_dir() -> PathBuf {
    std::env::var_os("LOCKSTEP_TEST_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(ROOT).join("target/test-deps"))
}

/// The Python interpreter of the test venv; panics with the install hint if a dependency is
/// missing (the tool's jars or the client).
pub fn check_deps() -> PathBuf {
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

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// The child gets SIGKILL if the test thread dies, so no broker or client outlives the test.
pub fn die_with_parent(cmd: &mut Command) -> &mut Command {
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

pub struct Broker {
    child: Child,
    pub port: u16,
    dir: Option<tempfile::TempDir>,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the broker under test in a new temporary directory named with `prefix` and waits
/// for its readiness line.
pub fn start_broker(prefix: &str) -> Broker {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("temporary directory");
    start_broker_in(dir, free_port())
}

/// Stops `broker` (SIGKILL) and starts it again on the same data and port.
pub fn restart(mut broker: Broker) -> Broker {
    let _ = broker.child.kill();
    let _ = broker.child.wait();
    let dir = broker.dir.take().expect("the broker's directory");
    start_broker_in(dir, broker.port)
}

pub fn start_broker_in(dir: tempfile::TempDir, port: u16) -> Broker {
    let data = dir.path().join("data");
    let kafka = std::env::var("LOCKSTEP_INTEROP_TARGET").as_deref() == Ok("kafka");
    let (mut cmd, marker) = if kafka {
        let mut c = Command::new(Path::new(ROOT).join("tools/kafka-reference.sh"));
        c.arg("run").arg(&data).arg(port.to_string());
        (c, "Kafka Server started")
    } else {
        let mut c = Command::new(env!("CARGO_BIN_EXE_lockstep"));
        c.args(LOCKSTEP_TEST_ARGS)
            .arg("--listen")
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
pub fn tool(port: u16, args: &[&str]) -> String {
    kafka_tool(
        "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
        port,
        args,
    )
}

/// Runs one of Kafka 4.4's tool classes against the broker, as [`tool`].
pub fn kafka_tool(class: &str, port: u16, args: &[&str]) -> String {
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
pub fn rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .filter(|r| !r.is_empty())
        .collect()
}

/// The row whose first columns are `prefix`; panics with the output if there is none.
pub fn row(text: &str, prefix: &[&str]) -> Vec<String> {
    rows(text)
        .into_iter()
        .find(|r| r.len() >= prefix.len() && r.iter().zip(prefix).all(|(a, b)| a == b))
        .unwrap_or_else(|| panic!("no row starting {prefix:?} in:\n{text}"))
}

pub fn python(script: &str) -> Command {
    let mut c = Command::new(check_deps());
    c.arg(Path::new(ROOT).join("tests/clients/python").join(script));
    c
}

/// A ShareConsumer held in the group until [`Holder::release`].
pub struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Holder {
    /// Starts a consumer of `topic` in `group` and waits until it holds records.
    pub fn start(port: u16, topic: &str, group: &str) -> Holder {
        let mut cmd = python("share_hold.py");
        cmd.args(["--bootstrap", &format!("127.0.0.1:{port}")])
            .args(["--topic", topic, "--group", group]);
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
    pub fn release(mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.flush();
        }
        let status = self.child.wait().expect("wait for share_hold.py");
        assert!(status.success(), "share_hold.py failed: {status}");
    }
}

/// Polls `--list --state` until `group` shows `state` (consumers leave asynchronously).
pub fn wait_for_state(port: u16, group: &str, state: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = tool(port, &["--list", "--state"]);
        if rows(&out)
            .iter()
            .any(|r| r.len() == 2 && r[0] == group && r[1] == state)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "group {group} not {state} after 60 s:\n{out}"
        );
        thread::sleep(Duration::from_millis(500));
    }
}

/// A `lockstep` (`bin`) started with `--config config --shards 2`, returned once it logs that it
/// is ready (its stdout is read for that line; stderr is inherited).
pub fn spawn_with_config(bin: &str, config: &Path) -> Child {
    let mut cmd = Command::new(bin);
    cmd.arg("--config")
        .arg(config)
        .arg("--shards")
        .arg("2")
        .args(LOCKSTEP_TEST_ARGS);
    let mut child = die_with_parent(&mut cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start lockstep");
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if line.contains("lockstep ready:") {
                let _ = tx.send(line);
            }
        }
    });
    let line = rx
        .recv_timeout(BROKER_START_TIMEOUT)
        .expect("lockstep ready in time");
    eprintln!("{line}");
    child
}

/// Runs `script` with `sh -ec` in `dir` (output discarded); panics naming it if it fails. The
/// security tests make their certificates with it (the `openssl` CLI).
pub fn sh(dir: &Path, script: &str) {
    let status = Command::new("sh")
        .arg("-ec")
        .arg(script)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run sh");
    assert!(status.success(), "failed: {script}");
}
