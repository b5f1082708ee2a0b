//! The target of the raw-protocol tests (`tests/share_fetch_limits.rs`,
//! `tests/share_renew_wire.rs`): the `lockstep` binary on a free loopback port, or, with
//! `LOCKSTEP_INTEROP_TARGET=kafka`, the Kafka 4.4 reference broker already running at
//! `LOCKSTEP_KAFKA_ADDR` (default 127.0.0.1:19092, `tools/kafka-reference.sh run`).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use super::{free_port, BROKER_START_TIMEOUT};

pub struct Broker {
    child: Option<Child>,
    pub addr: String,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Whether the tests run against Kafka 4.4 rather than the broker binary.
pub fn kafka() -> bool {
    std::env::var("LOCKSTEP_INTEROP_TARGET").as_deref() == Ok("kafka")
}

/// The broker under test: Kafka's address, or a `lockstep --shards SHARDS` started in a new
/// temporary directory named with `prefix`, once it has printed its readiness line.
pub fn start(prefix: &str, shards: u32) -> Broker {
    if kafka() {
        return Broker {
            child: None,
            addr: std::env::var("LOCKSTEP_KAFKA_ADDR").unwrap_or("127.0.0.1:19092".into()),
            _dir: None,
        };
    }
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("temporary directory");
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(super::LOCKSTEP_TEST_ARGS)
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--shards")
        .arg(shards.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start lockstep");
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if line.contains("lockstep ready:") {
                let _ = tx.send(());
            }
        }
    });
    let broker = Broker {
        child: Some(child),
        addr: format!("127.0.0.1:{port}"),
        _dir: Some(dir),
    };
    rx.recv_timeout(BROKER_START_TIMEOUT)
        .expect("lockstep ready in time");
    broker
}

/// A topic or group name no other run uses: `{tag}-{prefix}-{pid}-{nanos}`.
pub fn unique(tag: &str, prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{tag}-{prefix}-{}-{nanos}", std::process::id())
}
