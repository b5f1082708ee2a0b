//! Producer transactions with clients nobody here wrote, against a `lockstep`
//! started here (`--shards 2`), or against Apache Kafka 4.4 with `LOCKSTEP_INTEROP_TARGET=kafka`
//! (a private `tools/kafka-reference.sh run` broker with the timed-out-transaction check every
//! second), which is how the scenarios were validated:
//!
//! ```text
//! LOCKSTEP_INTEROP_TARGET=kafka cargo test --release --test producer_txn_interop
//! cargo test --release --test producer_txn_interop
//! ```
//!
//! What it proves:
//! - confluent-kafka 2.16 (librdkafka, `tests/clients/python/producer_txn.py`): aborted records
//!   invisible to a read_committed consumer and visible to read_uncommitted, committed ones
//!   exactly once and in order, control records taking one offset each; an open transaction
//!   holds the last stable offset (ListOffsets read_committed) at its first offset;
//!   `send_offsets_to_transaction` commits the group's offsets with the writes (none after an
//!   abort, the old one to a read_uncommitted OffsetFetch and no answer to a require_stable one
//!   while the transaction is open, a new member resumes at the committed offset); a second
//!   producer with the same transactional.id aborts the first one's transaction and fences it
//!   (librdkafka's fatal `_FENCED`, on the zombie's produce and on its commit); a transaction
//!   left open past `transaction.timeout.ms` is aborted by the coordinator and the producer's
//!   commit then fails fatally as fenced.
//! - Java kafka-clients 4.4 (`tests/clients/java/TxnReadProcessWrite.java`): the read-process-write
//!   loop (KafkaConsumer read_committed + transactional KafkaProducer with
//!   `sendOffsetsToTransaction`) copies 12 000 records of 3 partitions while the broker is
//!   SIGKILLed and restarted three times; the output topic read read_committed then holds every
//!   input record exactly once, in order per partition.
//!
//! Observed (Kafka 4.4 and Lockstep): every value
//! the Python scenarios record (LSO and high watermark with a transaction open and after it,
//! offsets of records and control records, committed offsets, error names and flags of the
//! fenced and timed-out producers) is the same on both. In the Java loop the client's error after
//! each broker restart differs: against Kafka the transaction times out while the broker is down
//! (`TimeoutException` from `sendOffsetsToTransaction`); against Lockstep, which restarts in well
//! under a second and does not persist group membership, TxnOffsetCommit answers
//! UNKNOWN_MEMBER_ID (`CommitFailedException`); either way the loop aborts, rejoins and the
//! output is exact.
//!
//! Needs `tools/install-test-deps.sh` (Python client, kafka-clients jars, Kafka 4.4) and a JDK.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use common::{die_with_parent, free_port, ROOT};
use serde_json::Value;

const CLIENT_TIMEOUT: Duration = Duration::from_secs(300);
/// Kafka's check for timed-out transactions runs every 10 s by default; the private Kafka
/// broker checks every second so that the timeout scenario stays short.
const KAFKA_EXTRA_PROPS: &str = "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000";

static SERIAL: Mutex<()> = Mutex::new(());

/// One broker at a time (the machine has two cores).
fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn kafka_target() -> bool {
    match std::env::var("LOCKSTEP_INTEROP_TARGET").as_deref() {
        Ok("kafka") => true,
        Ok("lockstep") | Ok("") | Err(_) => false,
        Ok(other) => panic!("LOCKSTEP_INTEROP_TARGET={other}: expected lockstep or kafka"),
    }
}

// ------------------------------------------------------------------------------------------------
// the broker under test

enum Broker {
    Lockstep(common::process::Lockstep),
    Kafka {
        child: Option<Child>,
        dir: tempfile::TempDir,
        port: u16,
    },
}

impl Broker {
    fn start(prefix: &str) -> Broker {
        if !kafka_target() {
            return Broker::Lockstep(common::process::Lockstep::start(prefix, 2, &[]));
        }
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir()
            .expect("temporary directory");
        let mut b = Broker::Kafka {
            child: None,
            dir,
            port: free_port(),
        };
        b.spawn_kafka();
        b
    }

    fn spawn_kafka(&mut self) {
        let Broker::Kafka { child, dir, port } = self else {
            unreachable!()
        };
        let mut cmd = Command::new(Path::new(ROOT).join("tools/kafka-reference.sh"));
        cmd.arg("run")
            .arg(dir.path().join("kafka"))
            .arg(port.to_string())
            .env("KAFKA_EXTRA_PROPS", KAFKA_EXTRA_PROPS);
        let mut c = die_with_parent(&mut cmd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start Kafka");
        let out = c.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if line.contains("Kafka Server started") {
                    let _ = tx.send(());
                }
            }
        });
        rx.recv_timeout(common::BROKER_START_TIMEOUT)
            .expect("Kafka not ready in time");
        *child = Some(c);
    }

    fn bootstrap(&self) -> String {
        match self {
            Broker::Lockstep(b) => b.addr(),
            Broker::Kafka { port, .. } => format!("127.0.0.1:{port}"),
        }
    }

    /// SIGKILL (for Kafka the JVM itself: `kafka-reference.sh run` execs java) and a restart on
    /// the same data and port.
    fn sigkill_and_restart(&mut self) {
        match self {
            Broker::Lockstep(b) => b.sigkill_and_restart(),
            Broker::Kafka { child, .. } => {
                if let Some(mut c) = child.take() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                self.spawn_kafka();
            }
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Broker::Kafka { child: Some(c), .. } = self {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

// ------------------------------------------------------------------------------------------------
// clients

/// Runs a client to its end (killed after [`CLIENT_TIMEOUT`]); echoes its stderr; returns its
/// exit success and the JSON of its `RESULT` line.
fn run_client(name: &str, cmd: &mut Command) -> (bool, Value) {
    let t0 = Instant::now();
    let mut child = die_with_parent(cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{name}: cannot start: {e}"));
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let ho = thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let he = thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if t0.elapsed() > CLIENT_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{name}: no exit after {CLIENT_TIMEOUT:?}:\n{}",
                he.join().unwrap()
            );
        }
        thread::sleep(Duration::from_millis(50));
    };
    let (stdout, stderr) = (ho.join().unwrap(), he.join().unwrap());
    eprintln!(
        "---- {name}: {status} in {:.1}s\n{stderr}",
        t0.elapsed().as_secs_f64()
    );
    (status.success(), result_line(name, &stdout, &stderr))
}

fn result_line(name: &str, stdout: &str, stderr: &str) -> Value {
    let line = stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("{name}: no RESULT line; stdout:\n{stdout}\nstderr:\n{stderr}"));
    eprintln!("{name}: RESULT {line}");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{name}: bad RESULT {line}: {e}"))
}

fn python_script(script: &str) -> Command {
    let mut c = Command::new(common::check_deps());
    c.arg(Path::new(ROOT).join("tests/clients/python").join(script))
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    c
}

fn python_snippet(code: &str) {
    let out = Command::new(common::check_deps())
        .args(["-c", code])
        .stdin(Stdio::null())
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "python failed:\n{code}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `TxnReadProcessWrite.java` compiled once per test process into a temporary directory.
fn java_classes() -> &'static Path {
    static CLASSES: OnceLock<tempfile::TempDir> = OnceLock::new();
    CLASSES
        .get_or_init(|| {
            let dir = tempfile::tempdir().expect("temporary directory");
            let status = Command::new("javac")
                .arg("-nowarn")
                .arg("-d")
                .arg(dir.path())
                .arg("-cp")
                .arg(jars().join("*"))
                .arg(Path::new(ROOT).join("tests/clients/java/TxnReadProcessWrite.java"))
                .status()
                .expect("javac (a JDK is needed)");
            assert!(status.success(), "javac TxnReadProcessWrite.java failed");
            dir
        })
        .path()
}

fn jars() -> PathBuf {
    let jars = common::deps_dir().join("jars");
    assert!(
        jars.join("kafka-clients-4.4.0.jar").exists(),
        "kafka-clients 4.4 missing in {} — {}",
        jars.display(),
        common::INSTALL_HINT
    );
    jars
}

fn java(mode: &str) -> Command {
    let mut cp = java_classes().as_os_str().to_owned();
    cp.push(":");
    cp.push(jars().join("*"));
    let mut c = Command::new("java");
    c.args(["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
        .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
        .arg("-cp")
        .arg(cp)
        .args(["TxnReadProcessWrite", mode]);
    c
}

// ------------------------------------------------------------------------------------------------
// the tests

#[test]
fn confluent_kafka_transactional_producer() {
    let _serial = serial();
    let broker = Broker::start("p17i-python");
    let (ok, r) = run_client(
        "producer_txn.py",
        python_script("producer_txn.py")
            .args(["--bootstrap", &broker.bootstrap()])
            .args(["--prefix", "p17i"])
            .args(["--txn-timeout-ms", "2000"])
            .args(["abort_commit", "offsets", "fence", "timeout"]),
    );
    assert_eq!(r["errors"], Value::Array(vec![]), "checks failed: {r}");
    assert!(ok, "producer_txn.py failed: {r}");

    let ac = &r["abort_commit"];
    assert_eq!(
        ac["lso_open"],
        serde_json::json!([[0, 12], [0, 12]]),
        "{ac}"
    );
    assert_eq!(ac["lso"], serde_json::json!([[0, 16], [0, 15]]), "{ac}");
    assert_eq!(ac["read_uncommitted"], 25, "{ac}");

    let off = &r["offsets"];
    assert_eq!(off["after_abort"], -1001, "{off}");
    assert_eq!(off["pending_read_uncommitted"], -1001, "{off}");
    assert_eq!(off["after_commit"], 6, "{off}");
    assert_eq!(off["resumed"], serde_json::json!([6, 7, 8, 9]), "{off}");

    // As against Kafka 4.4: the zombie's produce (INVALID_PRODUCER_EPOCH) and then its commit
    // raise librdkafka's fatal _FENCED.
    let fence = &r["fence"];
    for call in ["zombie_produce", "zombie_commit"] {
        assert_eq!(fence[call]["name"], "_FENCED", "{call}: {fence}");
        assert_eq!(fence[call]["fatal"], true, "{call}: {fence}");
    }
    assert_eq!(
        fence["read_committed"],
        serde_json::json!(["winner-0", "winner-1", "winner-2"])
    );

    // Kafka 4.4 bumps the epoch when it aborts a timed-out transaction: EndTxn answers
    // PRODUCER_FENCED, which librdkafka raises as a fatal _FENCED.
    let timeout = &r["timeout"];
    assert_eq!(timeout["lso"], serde_json::json!([[0, 5]]), "{timeout}");
    assert_eq!(timeout["commit_error"]["name"], "_FENCED", "{timeout}");
    assert_eq!(timeout["commit_error"]["fatal"], true, "{timeout}");
}

/// Records in the input of the read-process-write test, over [`RPW_PARTITIONS`] partitions.
const RPW_RECORDS: u64 = 12_000;
const RPW_PARTITIONS: u32 = 3;
/// Kills at these fractions of the input committed.
const RPW_KILLS: [f64; 3] = [0.2, 0.5, 0.8];

#[test]
fn java_read_process_write_exactly_once_under_sigkill() {
    let _serial = serial();
    let mut broker = Broker::start("p17i-java");
    let bootstrap = broker.bootstrap();
    let (input, output) = ("p17i-rpw-in", "p17i-rpw-out");
    python_snippet(&format!(
        "from confluent_kafka.admin import AdminClient, NewTopic\n\
         from confluent_kafka import Producer\n\
         a = AdminClient({{'bootstrap.servers': '{bootstrap}'}})\n\
         [f.result() for f in a.create_topics([NewTopic('{input}', {RPW_PARTITIONS}, 1), \
         NewTopic('{output}', {RPW_PARTITIONS}, 1)]).values()]\n\
         p = Producer({{'bootstrap.servers': '{bootstrap}', 'enable.idempotence': True, \
         'linger.ms': 20}})\n\
         for i in range({RPW_RECORDS}):\n    \
             p.produce('{input}', value=b'in-%d-%d' % (i % {RPW_PARTITIONS}, i), \
         partition=i % {RPW_PARTITIONS})\n\
         assert p.flush(60) == 0"
    ));

    let mut cmd = java("run");
    cmd.args(["--bootstrap", &bootstrap])
        .args(["--in", input, "--out", output])
        .args(["--group", "p17i-rpw-group", "--txn-id", "p17i-rpw-txn"])
        .args(["--partitions", &RPW_PARTITIONS.to_string()])
        .args(["--batch", "100", "--pause-ms", "20", "--deadline-s", "240"]);
    let mut child = die_with_parent(&mut cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start TxnReadProcessWrite");
    let out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let he = thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let (tx, rx) = mpsc::channel::<String>();
    thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let t0 = Instant::now();
    let mut kills = 0;
    let mut restarts = Vec::new();
    let mut result = None;
    while result.is_none() {
        assert!(
            t0.elapsed() < CLIENT_TIMEOUT,
            "the read-process-write loop did not finish in {CLIENT_TIMEOUT:?}"
        );
        let line = match rx.recv_timeout(Duration::from_secs(1)) {
            Ok(line) => line,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        if let Some(n) = line.strip_prefix("PROGRESS ") {
            let n: u64 = n.parse().expect("a count");
            if kills < RPW_KILLS.len() && n as f64 >= RPW_KILLS[kills] * RPW_RECORDS as f64 {
                eprintln!(
                    "{:.1}s: {n} records committed: SIGKILL + restart",
                    t0.elapsed().as_secs_f64()
                );
                broker.sigkill_and_restart();
                kills += 1;
            }
        } else if let Some(reason) = line.strip_prefix("RESTART ") {
            eprintln!(
                "{:.1}s: client restart: {reason}",
                t0.elapsed().as_secs_f64()
            );
            restarts.push(reason.to_string());
        } else if let Some(json) = line.strip_prefix("RESULT ") {
            result = Some(json.to_string());
        }
    }
    let status = child.wait().expect("wait for TxnReadProcessWrite");
    let stderr = he.join().unwrap();
    let result = result.unwrap_or_else(|| panic!("no RESULT ({status}):\n{stderr}"));
    eprintln!(
        "TxnReadProcessWrite: {status} in {:.1}s: {result}",
        t0.elapsed().as_secs_f64()
    );
    let result: Value = serde_json::from_str(&result).expect("RESULT json");
    assert!(
        status.success() && result["done"] == true,
        "{result}\n{stderr}"
    );
    assert_eq!(result["committed"], RPW_RECORDS, "{result}");
    assert_eq!(
        kills,
        RPW_KILLS.len(),
        "the broker was killed at every step"
    );

    let (_, verify) = run_client(
        "TxnReadProcessWrite verify",
        java("verify")
            .args(["--bootstrap", &bootstrap])
            .args(["--in", input, "--out", output])
            .args(["--partitions", &RPW_PARTITIONS.to_string()]),
    );
    assert_eq!(verify["input"], RPW_RECORDS, "{verify}");
    assert!(
        verify["ok"] == true,
        "output = input, each record once, in order per partition: {verify}"
    );
}
