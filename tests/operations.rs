//! What an operator relies on, through the binary: the data directory is never replaced or
//! emptied by a start (a lost `metadata.json`, another cluster's `meta.properties`, a partition
//! directory no topic names), the service manager's readiness protocol (`NOTIFY_SOCKET`:
//! `READY=1` once serving, `STOPPING=1` on SIGTERM, then exit 0), the health endpoints beside the
//! metrics (`/ready`, `/live`, 404 elsewhere), `log.format=json`, `--check-config` and
//! `--version`.

mod common;

use common::process::{binary, Lockstep};
use lockstep::client::admin::{Admin, NewTopic};
use lockstep::client::producer::{Producer, ProducerRecord};
use std::io::{Read, Write};
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a refused start may take to exit.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(60);

/// Creates `topic` (2 partitions) and writes `n` records into partition 0; returns the next
/// offset.
fn fill(broker: &Lockstep, topic: &str, n: usize) -> i64 {
    let mut admin = Admin::connect(&broker.addr()).unwrap();
    admin.create_topics(&[NewTopic::new(topic, 2)]).unwrap();
    let records: Vec<ProducerRecord> = (0..n)
        .map(|i| ProducerRecord::value(format!("record-{i}")))
        .collect();
    let base = Producer::new(&broker.addr())
        .produce(topic, 0, &records)
        .unwrap();
    base + n as i64
}

/// Every file under `dir` with its size, sorted: what a refused start must leave untouched.
fn files_under(dir: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                let rel = entry
                    .path()
                    .strip_prefix(dir)
                    .unwrap()
                    .display()
                    .to_string();
                out.push((rel, meta.len()));
            }
        }
    }
    out.sort();
    out
}

/// Runs the broker on `data` expecting it to refuse to start: its exit code and stderr.
fn refused_start(data: &Path) -> (Option<i32>, String) {
    let mut child = Command::new(binary())
        .args(common::LOCKSTEP_TEST_ARGS)
        .args(["--listen", &format!("127.0.0.1:{}", common::free_port())])
        .arg("--data-dir")
        .arg(data)
        .args(["--shards", "2"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > REFUSAL_TIMEOUT {
            let _ = child.kill();
            panic!("the broker started on a data directory it should refuse");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.code(), err)
}

/// The line of stderr the binary prints for a failure to start (`lockstep: ...`).
fn failure_line(stderr: &str) -> &str {
    stderr
        .lines()
        .find(|l| l.starts_with("lockstep: "))
        .unwrap_or_else(|| panic!("no failure line in:\n{stderr}"))
}

#[test]
fn a_lost_metadata_file_is_refused_and_the_data_kept() {
    let mut broker = Lockstep::start("ops-lost-metadata", 2, &[]);
    let end = fill(&broker, "kept", 200);
    broker.signal(libc::SIGTERM);
    assert!(broker.wait_exit(Duration::from_secs(30)).unwrap().success());
    let data = broker.data_dir();
    let before = files_under(&data);
    let metadata = data.join("metadata.json");
    let saved = data.join("metadata.json.saved");
    std::fs::rename(&metadata, &saved).unwrap();

    let (code, stderr) = refused_start(&data);
    assert_eq!(code, Some(3), "{stderr}");
    let line = failure_line(&stderr);
    assert!(
        line.contains(&metadata.display().to_string()) && line.contains("restore"),
        "{line}"
    );
    // Nothing was created, renamed or deleted (the lock file aside).
    let mut after = files_under(&data);
    after.retain(|(f, _)| f != "metadata.json.saved");
    let mut expected = before.clone();
    expected.retain(|(f, _)| f != "metadata.json");
    assert_eq!(after, expected);

    // Without meta.properties too (a copy of logs/ alone): still refused, naming the data.
    let meta = data.join("meta.properties");
    let meta_saved = data.join("meta.properties.saved");
    std::fs::rename(&meta, &meta_saved).unwrap();
    let (code, stderr) = refused_start(&data);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(failure_line(&stderr).contains("holds data"), "{stderr}");

    // Restored, the broker starts on its data: the next record goes after the 200.
    std::fs::rename(&saved, &metadata).unwrap();
    std::fs::rename(&meta_saved, &meta).unwrap();
    broker.spawn(&[]);
    let next = Producer::new(&broker.addr())
        .produce("kept", 0, &[ProducerRecord::value("after")])
        .unwrap();
    assert_eq!(next, end);
}

#[test]
fn another_clusters_identity_is_refused() {
    let mut broker = Lockstep::start("ops-cluster-id", 2, &[]);
    fill(&broker, "t", 10);
    broker.kill();
    let data = broker.data_dir();
    let meta = data.join("meta.properties");
    let text = std::fs::read_to_string(&meta).unwrap();
    assert!(text.contains("cluster.id="), "{text}");
    std::fs::write(&meta, "version=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\n").unwrap();
    let (code, stderr) = refused_start(&data);
    assert_eq!(code, Some(3), "{stderr}");
    let line = failure_line(&stderr);
    assert!(
        line.contains("AAAAAAAAAAAAAAAAAAAAAA") && line.contains("refusing"),
        "{line}"
    );
    std::fs::write(&meta, text).unwrap();
    broker.spawn(&[]);
}

#[test]
fn a_partition_directory_no_topic_names_is_set_aside_not_deleted() {
    let mut broker = Lockstep::start("ops-stray", 2, &[]);
    fill(&broker, "t", 10);
    broker.kill();
    let logs = broker.data_dir().join("logs");
    let stranger = logs.join("0123456789abcdef0123456789abcdef-0");
    std::fs::create_dir_all(&stranger).unwrap();
    std::fs::write(
        stranger.join("00000000000000000000.log"),
        b"someone's records",
    )
    .unwrap();
    broker.spawn(&[]);
    let aside = logs.join("0123456789abcdef0123456789abcdef-0-stray");
    assert!(!stranger.exists());
    assert_eq!(
        std::fs::read(aside.join("00000000000000000000.log")).unwrap(),
        b"someone's records"
    );
    assert!(broker.log(2).contains("set aside"), "{}", broker.log(2));
    // The topic's own partitions are untouched and served.
    let next = Producer::new(&broker.addr())
        .produce("t", 0, &[ProducerRecord::value("x")])
        .unwrap();
    assert_eq!(next, 10);
}

fn http_get(port: u16, path: &str) -> String {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

fn status_line(response: &str) -> &str {
    response.lines().next().unwrap_or_default()
}

/// The next datagram on `socket`, polled while `child` runs: a broker that exits first fails
/// the test with its status and stderr instead of a silent wait.
fn next_notification(
    socket: &UnixDatagram,
    child: &mut std::process::Child,
    stderr: &std::sync::Mutex<String>,
    what: &str,
) -> String {
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let deadline = Instant::now() + common::BROKER_START_TIMEOUT;
    let mut buf = [0u8; 512];
    loop {
        match socket.recv(&mut buf) {
            Ok(n) => return String::from_utf8_lossy(&buf[..n]).into_owned(),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("waiting for {what}: {e}"),
        }
        if let Some(status) = child.try_wait().unwrap() {
            std::thread::sleep(Duration::from_millis(200));
            panic!(
                "the broker exited ({status}) before {what}; stderr:\n{}",
                stderr.lock().unwrap()
            );
        }
        assert!(
            Instant::now() < deadline,
            "no {what} within {:?}; stderr:\n{}",
            common::BROKER_START_TIMEOUT,
            stderr.lock().unwrap()
        );
    }
}

#[test]
fn readiness_health_endpoints_and_json_logs() {
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&socket_path).unwrap();
    let metrics = common::free_port();
    let mut child = Command::new(binary())
        .args(common::LOCKSTEP_TEST_ARGS)
        .args(["--listen", &format!("127.0.0.1:{}", common::free_port())])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--shards", "2"])
        .args(["--override", &format!("metrics.listen=127.0.0.1:{metrics}")])
        .args(["--override", "log.format=json"])
        .env("NOTIFY_SOCKET", &socket_path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Drained on a thread so a chatty broker never blocks on a full pipe.
    let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let drain = {
        let mut pipe = child.stderr.take().unwrap();
        let stderr = stderr.clone();
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            stderr.lock().unwrap().push_str(&text);
        })
    };
    let message = next_notification(&notify, &mut child, &stderr, "READY=1");
    assert!(message.lines().any(|l| l == "READY=1"), "{message}");
    assert!(status_line(&http_get(metrics, "/ready")).contains(" 200 "));
    assert!(status_line(&http_get(metrics, "/live")).contains(" 200 "));
    let body = http_get(metrics, "/metrics");
    assert!(status_line(&body).contains(" 200 "));
    assert!(body.contains("# TYPE lockstep_share_transaction_commit_time_ms histogram"));
    assert!(status_line(&http_get(metrics, "/")).contains(" 404 "));
    assert!(status_line(&http_get(metrics, "/metrics/x")).contains(" 404 "));

    // SIGTERM: STOPPING=1, then a clean exit.
    // SAFETY: kill(2) with the pid of a child we spawned and have not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let message = next_notification(&notify, &mut child, &stderr, "STOPPING=1");
    assert_eq!(message, "STOPPING=1");
    let status = child.wait().unwrap();
    drain.join().unwrap();
    let stderr = stderr.lock().unwrap();
    assert!(status.success(), "{status}; stderr:\n{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty());
    for line in lines {
        let value: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert!(
            value["level"].is_string() && value["timestamp"].is_string(),
            "{line}"
        );
    }
}

fn check_config(file: &Path) -> std::process::Output {
    Command::new(binary())
        .arg("--check-config")
        .arg(file)
        .output()
        .unwrap()
}

#[test]
fn check_config_prints_the_effective_configuration_or_kafkas_message() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("server.properties");
    std::fs::write(
        &file,
        "listeners=PLAINTEXT://127.0.0.1:19092\nlog.dirs=/srv/lockstep\nnum.partitions=3\n",
    )
    .unwrap();
    let out = check_config(&file);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    for line in [
        "listeners=PLAINTEXT://127.0.0.1:19092",
        "log.dirs=/srv/lockstep",
        "num.partitions=3",
        "group.initial.rebalance.delay.ms=3000",
        "log.retention.ms=604800000",
        "log.format=text",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "missing {line}:\n{stdout}"
        );
    }
    // The shipped default configuration is valid.
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/server.properties");
    let out = check_config(&shipped);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    std::fs::write(&file, "num.partitions=zero\n").unwrap();
    let out = check_config(&file);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Invalid value zero for configuration num.partitions")
            && stderr.contains("line 1"),
        "{stderr}"
    );
    std::fs::write(&file, "log.format=xml\n").unwrap();
    let out = check_config(&file);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("Invalid value xml for configuration log.format"));

    let out = Command::new(binary()).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("lockstep {}", env!("CARGO_PKG_VERSION"))
    );
}
