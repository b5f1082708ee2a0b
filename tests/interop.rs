//! Real-client interop tests: third-party Kafka clients (confluent-kafka 2.16 / librdkafka 2.16,
//! the Java kafka-clients 4.4 jar, Debian's kcat) against a broker started here on a free loopback
//! port in a temporary directory.
//!
//! Which broker: by default the `lockstep` binary of this crate (`--shards 2`); with
//! `LOCKSTEP_INTEROP_TARGET=kafka`, the Apache Kafka 4.4 reference broker
//! (`tools/kafka-reference.sh run`), which is how these tests are validated:
//!
//! ```text
//! tools/install-test-deps.sh --with-kafka
//! LOCKSTEP_INTEROP_TARGET=kafka cargo test --release --test interop
//! cargo test --release --test interop                    # against Lockstep
//! ```
//!
//! `LOCKSTEP_INTEROP_KEEP=1` keeps every broker directory (data, broker logs); a failed test's is
//! always kept. For Kafka, `KAFKA_REQUEST_LOG=1` adds DIR/data/request.log (every request as JSON).
//!
//! The client programs live in `tests/clients/` and print one `RESULT {json}` line; the tests
//! assert on it. The clients come from `tools/install-test-deps.sh` (under `target/test-deps/`);
//! when they are missing the tests fail and say so. Tests run one at a time (one broker at a
//! time: the machine has two cores). The share-group tests run real
//! `ShareConsumer` (librdkafka) and `KafkaShareConsumer` (Java) clients.

use std::collections::hash_map::DefaultHasher;
use std::fs::{self, File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const INSTALL_HINT: &str =
    "run tools/install-test-deps.sh (it installs the interop clients into target/test-deps/)";
/// Records per client in the produce/fetch tests (at least 100 000).
const RECORDS: u64 = 100_000;
const PARTITIONS: u32 = 4;
const BROKER_START_TIMEOUT: Duration = Duration::from_secs(180);
const CLIENT_TIMEOUT: Duration = Duration::from_secs(300);

// ------------------------------------------------------------------------------------------------
// serialisation of tests: one broker at a time

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

// ------------------------------------------------------------------------------------------------
// third-party clients

struct Deps {
    python: PathBuf,
    jars: PathBuf,
    kcat: PathBuf,
}

fn deps_dir() -> PathBuf {
    std::env::var_os("LOCKSTEP_TEST_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(ROOT).join("target/test-deps"))
}

fn deps() -> &'static Deps {
    static DEPS: OnceLock<Deps> = OnceLock::new();
    DEPS.get_or_init(|| {
        let d = deps_dir();
        let python = d.join("venv/bin/python");
        let jars = d.join("jars");
        assert!(
            python.exists(),
            "interop client missing: {} (confluent-kafka venv) — {INSTALL_HINT}",
            python.display()
        );
        let ok = Command::new(&python)
            .args([
                "-c",
                "import confluent_kafka; from confluent_kafka import ShareConsumer",
            ])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(
            ok,
            "confluent-kafka with ShareConsumer not importable from {} — {INSTALL_HINT}",
            python.display()
        );
        assert!(
            jars.join("kafka-clients-4.4.0.jar").exists(),
            "interop client missing: {}/kafka-clients-4.4.0.jar — {INSTALL_HINT}",
            jars.display()
        );
        let kcat = which("kcat")
            .unwrap_or_else(|| panic!("interop client missing: kcat not on PATH — {INSTALL_HINT}"));
        for tool in ["java", "javac"] {
            assert!(
                which(tool).is_some(),
                "{tool} not on PATH (Java 17 JDK needed for the kafka-clients tests)"
            );
        }
        Deps { python, jars, kcat }
    })
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|p| p.join(name))
        .find(|p| p.is_file())
}

fn clients_dir() -> PathBuf {
    Path::new(ROOT).join("tests/clients")
}

/// Compiles tests/clients/java/*.java once (per source content) into target/interop-java/<hash>.
fn java_classes() -> &'static PathBuf {
    static CLASSES: OnceLock<PathBuf> = OnceLock::new();
    CLASSES.get_or_init(|| {
        let deps = deps();
        let src = clients_dir().join("java");
        let mut files: Vec<PathBuf> = fs::read_dir(&src)
            .expect("tests/clients/java")
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "java"))
            .collect();
        files.sort();
        let mut h = DefaultHasher::new();
        for f in &files {
            f.file_name().hash(&mut h);
            fs::read(f).unwrap().hash(&mut h);
        }
        let base = Path::new(ROOT).join("target/interop-java");
        let out = base.join(format!("{:016x}", h.finish()));
        if out.join(".complete").exists() {
            return out;
        }
        let tmp = base.join(format!("tmp-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        fs::create_dir_all(&tmp).unwrap();
        let t0 = Instant::now();
        let st = Command::new("javac")
            .arg("-nowarn")
            .arg("-d")
            .arg(&tmp)
            .arg("-cp")
            .arg(deps.jars.join("*"))
            .args(&files)
            .status()
            .expect("javac");
        assert!(st.success(), "javac of tests/clients/java failed");
        File::create(tmp.join(".complete")).unwrap();
        if fs::rename(&tmp, &out).is_err() {
            // another test process compiled the same sources first
            let _ = fs::remove_dir_all(&tmp);
        }
        eprintln!(
            "compiled tests/clients/java in {:.1}s",
            t0.elapsed().as_secs_f64()
        );
        out
    })
}

// ------------------------------------------------------------------------------------------------
// brokers

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Target {
    Lockstep,
    Kafka,
}

fn target() -> Target {
    match std::env::var("LOCKSTEP_INTEROP_TARGET").as_deref() {
        Ok("kafka") => Target::Kafka,
        Ok("lockstep") | Ok("") | Err(_) => Target::Lockstep,
        Ok(other) => panic!("LOCKSTEP_INTEROP_TARGET={other}: expected lockstep or kafka"),
    }
}

struct Broker {
    target: Target,
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
    starts: u32,
}

/// The child gets SIGKILL if the thread that started it dies (a killed test binary leaves no broker
/// or client behind). Brokers and clients are started and dropped on their test's own thread, and
/// the signal survives the `exec java` in tools/kafka-reference.sh.
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

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Broker {
    fn start() -> Broker {
        let target = target();
        let dir = tempfile::Builder::new()
            .prefix("lockstep-interop-")
            .tempdir()
            .unwrap();
        let mut b = Broker {
            target,
            dir,
            port: free_port(),
            child: None,
            starts: 0,
        };
        b.spawn();
        b
    }

    fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join(format!("broker-{}.log", self.starts))
    }

    fn spawn(&mut self) {
        self.starts += 1;
        let data = self.dir.path().join("data");
        let (mut cmd, ready_marker) = match self.target {
            Target::Lockstep => {
                let mut c = Command::new(env!("CARGO_BIN_EXE_lockstep"));
                c.args(["--override", "group.initial.rebalance.delay.ms=0"])
                    .arg("--listen")
                    .arg(self.bootstrap())
                    .arg("--data-dir")
                    .arg(&data)
                    .arg("--shards")
                    .arg("2");
                (c, "lockstep ready:")
            }
            Target::Kafka => {
                let mut c = Command::new(Path::new(ROOT).join("tools/kafka-reference.sh"));
                c.arg("run").arg(&data).arg(self.port.to_string());
                (c, "Kafka Server started")
            }
        };
        let t0 = Instant::now();
        let mut child = die_with_parent(&mut cmd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {:?} broker: {e}", self.target));
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let (tx, rx) = mpsc::channel::<()>();
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        let log2 = log.try_clone().unwrap();
        let marker = ready_marker.to_string();
        thread::spawn(move || copy_lines(out, log, Some((marker, tx))));
        thread::spawn(move || copy_lines(err, log2, None));
        self.child = Some(child);
        loop {
            if rx.try_recv().is_ok() && api_versions_ok(self.port) {
                break;
            }
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "{:?} broker exited during start-up ({st}); log {}:\n{}",
                    self.target,
                    self.log_path().display(),
                    tail(&self.log_path(), 60)
                );
            }
            if t0.elapsed() > BROKER_START_TIMEOUT {
                panic!(
                    "{:?} broker not ready after {:?}; log:\n{}",
                    self.target,
                    BROKER_START_TIMEOUT,
                    tail(&self.log_path(), 60)
                );
            }
            thread::sleep(Duration::from_millis(100));
        }
        eprintln!(
            "{:?} broker #{} ready on {} in {:.1}s (dir {})",
            self.target,
            self.starts,
            self.bootstrap(),
            t0.elapsed().as_secs_f64(),
            self.dir.path().display()
        );
    }

    /// SIGKILL (for Kafka: the JVM itself, since `kafka-reference.sh run` execs java).
    fn sigkill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().expect("SIGKILL broker");
            let st = c.wait().unwrap();
            eprintln!("{:?} broker killed ({st})", self.target);
        }
    }

    fn sigkill_and_restart(&mut self) {
        self.sigkill();
        self.spawn();
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.sigkill();
        if thread::panicking() || std::env::var_os("LOCKSTEP_INTEROP_KEEP").is_some() {
            // keep the directory (data and logs) of a failed test, or of every test if asked
            let p = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap()).keep();
            eprintln!("broker directory kept for inspection: {}", p.display());
        }
    }
}

fn copy_lines(src: impl Read, mut log: File, mut ready: Option<(String, mpsc::Sender<()>)>) {
    for line in BufReader::new(src).lines() {
        let Ok(line) = line else { break };
        let _ = writeln!(log, "{line}");
        if let Some((marker, tx)) = &ready {
            if line.contains(marker.as_str()) {
                let _ = tx.send(());
                ready = None;
            }
        }
    }
}

/// An ApiVersions v0 round trip on a fresh connection: the broker is serving requests.
fn api_versions_ok(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let client_id = b"interop-probe";
    let mut req = Vec::new();
    req.extend_from_slice(&18i16.to_be_bytes()); // ApiVersions
    req.extend_from_slice(&0i16.to_be_bytes()); // v0
    req.extend_from_slice(&7i32.to_be_bytes()); // correlation id
    req.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
    req.extend_from_slice(client_id);
    let mut frame = (req.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&req);
    if s.write_all(&frame).is_err() {
        return false;
    }
    let mut len = [0u8; 4];
    if s.read_exact(&mut len).is_err() {
        return false;
    }
    let n = i32::from_be_bytes(len);
    if !(6..1 << 20).contains(&n) {
        return false;
    }
    let mut body = vec![0u8; n as usize];
    if s.read_exact(&mut body).is_err() {
        return false;
    }
    i32::from_be_bytes(body[0..4].try_into().unwrap()) == 7
        && i16::from_be_bytes([body[4], body[5]]) == 0
}

fn tail(path: &Path, lines: usize) -> String {
    let s = fs::read_to_string(path).unwrap_or_default();
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

// ------------------------------------------------------------------------------------------------
// running client programs

struct Run {
    result: Value,
    status: ExitStatus,
}

impl Run {
    fn u(&self, k: &str) -> u64 {
        self.result
            .get(k)
            .and_then(Value::as_u64)
            .unwrap_or_else(|| panic!("RESULT has no number {k:?}: {}", self.result))
    }
}

/// Runs a client program with a timeout; echoes its output; returns its parsed RESULT line.
fn run_client(name: &str, mut cmd: Command) -> Run {
    let t0 = Instant::now();
    let mut child = die_with_parent(&mut cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{name}: cannot start {cmd:?}: {e}"));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
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
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > CLIENT_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            let e = he.join().unwrap();
            panic!(
                "{name}: no exit after {CLIENT_TIMEOUT:?}; stderr tail:\n{}",
                last_chars(&e, 4000)
            );
        }
        thread::sleep(Duration::from_millis(50));
    };
    let stdout = ho.join().unwrap();
    let stderr = he.join().unwrap();
    eprintln!(
        "---- {name}: {status} in {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    eprintln!("{}", last_chars(&stderr, 6000));
    let line = stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| {
            panic!(
                "{name}: no RESULT line ({status}); stdout:\n{stdout}\nstderr:\n{}",
                last_chars(&stderr, 4000)
            )
        });
    eprintln!("RESULT {line}");
    let result: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("{name}: bad RESULT json {line}: {e}"));
    Run { result, status }
}

fn last_chars(s: &str, n: usize) -> &str {
    let mut i = s.len().saturating_sub(n);
    while !s.is_char_boundary(i) {
        i += 1;
    }
    &s[i..]
}

fn python(script: &str) -> Command {
    let mut c = Command::new(&deps().python);
    c.arg(clients_dir().join("python").join(script));
    c.env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    c
}

fn java(main: &str) -> Command {
    let classes = java_classes();
    let mut cp = std::ffi::OsString::from(classes.as_os_str());
    cp.push(":");
    cp.push(deps().jars.join("*"));
    let mut c = Command::new("java");
    c.arg("-Xmx512m")
        .arg("-XX:+UseSerialGC")
        .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
        .arg("-cp")
        .arg(cp)
        .arg(main);
    c
}

fn args(c: &mut Command, kv: &[(&str, String)]) {
    for (k, v) in kv {
        c.arg(k).arg(v);
    }
}

/// Asserts a produce/verify run of produce_consume.py / ProduceConsume.java.
fn assert_roundtrip(name: &str, r: &Run, count: u64, produced: bool) {
    assert_eq!(
        r.result["ok"],
        Value::Bool(true),
        "{name}: client reported failure: {}",
        r.result
    );
    assert!(r.status.success(), "{name}: exit {}", r.status);
    if produced {
        assert_eq!(r.u("produced"), count, "{name}: produced");
        assert_eq!(r.u("acked"), count, "{name}: acknowledged");
        assert_eq!(r.u("produce_errors"), 0, "{name}: produce errors");
        assert_eq!(
            r.u("bad_offsets"),
            0,
            "{name}: records not at the expected partition/offset"
        );
    }
    assert_eq!(r.u("consumed"), count, "{name}: consumed");
    assert_eq!(r.u("expected"), count, "{name}: expected");
    assert_eq!(r.u("mismatches"), 0, "{name}: byte mismatches");
    assert_eq!(
        r.u("short_partitions"),
        0,
        "{name}: partitions not fully read"
    );
}

fn py_roundtrip(b: &Broker, topic: &str, count: u64, mode: &str, extra: &[(&str, String)]) -> Run {
    let mut c = python("produce_consume.py");
    args(
        &mut c,
        &[
            ("--bootstrap", b.bootstrap()),
            ("--topic", topic.into()),
            ("--partitions", PARTITIONS.to_string()),
            ("--count", count.to_string()),
            ("--mode", mode.into()),
        ],
    );
    args(&mut c, extra);
    run_client(&format!("python {mode} {topic}"), c)
}

fn java_roundtrip(
    b: &Broker,
    topic: &str,
    count: u64,
    mode: &str,
    extra: &[(&str, String)],
) -> Run {
    let mut c = java("ProduceConsume");
    args(
        &mut c,
        &[
            ("--bootstrap", b.bootstrap()),
            ("--topic", topic.into()),
            ("--partitions", PARTITIONS.to_string()),
            ("--count", count.to_string()),
            ("--mode", mode.into()),
        ],
    );
    args(&mut c, extra);
    run_client(&format!("java {mode} {topic}"), c)
}

fn base_ts(r: &Run) -> (&'static str, String) {
    ("--base-ts", r.u("base_ts").to_string())
}

// ------------------------------------------------------------------------------------------------
// produce / fetch

#[test]
fn python_confluent_kafka_produce_fetch_sigkill_restart() {
    let _g = serial();
    deps();
    let mut b = Broker::start();
    let r = py_roundtrip(&b, "py-roundtrip", RECORDS, "both", &[]);
    assert_roundtrip("python produce+fetch", &r, RECORDS, true);
    b.sigkill_and_restart();
    let v = py_roundtrip(&b, "py-roundtrip", RECORDS, "verify", &[base_ts(&r)]);
    assert_roundtrip("python re-read after SIGKILL + restart", &v, RECORDS, false);
    // and an independent client reads the same bytes
    let j = java_roundtrip(&b, "py-roundtrip", RECORDS, "verify", &[base_ts(&r)]);
    assert_roundtrip("java re-read of python's records", &j, RECORDS, false);
}

#[test]
fn java_kafka_clients_produce_fetch_sigkill_restart() {
    let _g = serial();
    deps();
    let mut b = Broker::start();
    let r = java_roundtrip(&b, "java-roundtrip", RECORDS, "both", &[]);
    assert_roundtrip("java produce+fetch", &r, RECORDS, true);
    b.sigkill_and_restart();
    let v = java_roundtrip(&b, "java-roundtrip", RECORDS, "verify", &[base_ts(&r)]);
    assert_roundtrip("java re-read after SIGKILL + restart", &v, RECORDS, false);
    let p = py_roundtrip(&b, "java-roundtrip", RECORDS, "verify", &[base_ts(&r)]);
    assert_roundtrip("python re-read of java's records", &p, RECORDS, false);
}

#[test]
fn kcat_produce_consume_sigkill_restart() {
    let _g = serial();
    let d = deps();
    let mut b = Broker::start();
    let kc = |bootstrap: String, mode: &str| {
        let mut c = python("kcat_roundtrip.py");
        args(
            &mut c,
            &[
                ("--bootstrap", bootstrap),
                ("--topic", "kcat-roundtrip".into()),
                ("--partitions", "3".into()),
                ("--count", "5000".into()),
                ("--mode", mode.into()),
                ("--kcat", d.kcat.display().to_string()),
            ],
        );
        run_client(&format!("kcat {mode}"), c)
    };
    for (i, mode) in ["both", "verify"].into_iter().enumerate() {
        if i == 1 {
            b.sigkill_and_restart();
        }
        let r = kc(b.bootstrap(), mode);
        assert_eq!(
            r.result["ok"],
            Value::Bool(true),
            "kcat {mode}: {}",
            r.result
        );
        assert!(r.status.success());
        assert_eq!(r.u("consumed"), 5000, "kcat {mode}: consumed");
        assert_eq!(r.u("missing"), 0, "kcat {mode}: missing");
        assert_eq!(r.u("mismatches"), 0, "kcat {mode}: mismatches");
        assert_eq!(
            r.u("partitions_used"),
            3,
            "kcat {mode}: the default partitioner spreads keys over all partitions"
        );
    }
}

/// Compressed batches (stored as sent, decompressed only by the consumer): each client produces
/// with two codecs and the other client reads them back.
#[test]
fn compressed_batches_cross_client() {
    let _g = serial();
    deps();
    let b = Broker::start();
    const N: u64 = 5_000;
    for codec in ["gzip", "zstd"] {
        let topic = format!("py-{codec}");
        let r = py_roundtrip(&b, &topic, N, "both", &[("--compression", codec.into())]);
        assert_roundtrip(&format!("python {codec}"), &r, N, true);
        let v = java_roundtrip(&b, &topic, N, "verify", &[base_ts(&r)]);
        assert_roundtrip(&format!("java reads python {codec}"), &v, N, false);
    }
    for codec in ["lz4", "snappy"] {
        let topic = format!("java-{codec}");
        let r = java_roundtrip(&b, &topic, N, "both", &[("--compression", codec.into())]);
        assert_roundtrip(&format!("java {codec}"), &r, N, true);
        let v = py_roundtrip(&b, &topic, N, "verify", &[base_ts(&r)]);
        assert_roundtrip(&format!("python reads java {codec}"), &v, N, false);
    }
}

/// The harness itself must be able to fail: a verify that expects one record more than was
/// produced reports it (the clients do not just print ok).
#[test]
fn harness_detects_missing_records() {
    let _g = serial();
    deps();
    let b = Broker::start();
    let r = py_roundtrip(&b, "short", 1000, "both", &[]);
    assert_roundtrip("python produce+fetch 1000", &r, 1000, true);
    let v = py_roundtrip(
        &b,
        "short",
        1001,
        "verify",
        &[base_ts(&r), ("--timeout", "5".into())],
    );
    assert_eq!(
        v.result["ok"],
        Value::Bool(false),
        "python verify of 1001 on 1000 records must fail"
    );
    assert!(!v.status.success());
    let j = java_roundtrip(
        &b,
        "short",
        1001,
        "verify",
        &[base_ts(&r), ("--timeout", "5".into())],
    );
    assert_eq!(
        j.result["ok"],
        Value::Bool(false),
        "java verify of 1001 on 1000 records must fail"
    );
    assert!(!j.status.success());
    // and a wrong timestamp base is a byte mismatch
    let t = py_roundtrip(
        &b,
        "short",
        1000,
        "verify",
        &[("--base-ts", (r.u("base_ts") + 1).to_string())],
    );
    assert_eq!(
        t.result["ok"],
        Value::Bool(false),
        "python verify with the wrong timestamps must fail"
    );
    assert!(t.u("mismatches") > 0);
}

// ------------------------------------------------------------------------------------------------
// share groups: validated against Kafka 4.4, run against Lockstep

fn py_share(b: &Broker, scenario: &str, topic: &str, group: &str, extra: &[(&str, String)]) -> Run {
    let mut c = python("share_consume.py");
    args(
        &mut c,
        &[
            ("--bootstrap", b.bootstrap()),
            ("--topic", topic.into()),
            ("--group", group.into()),
            ("--scenario", scenario.into()),
        ],
    );
    args(&mut c, extra);
    run_client(&format!("python share {scenario}"), c)
}

fn java_share(
    b: &Broker,
    scenario: &str,
    topic: &str,
    group: &str,
    extra: &[(&str, String)],
) -> Run {
    let mut c = java("ShareConsume");
    args(
        &mut c,
        &[
            ("--bootstrap", b.bootstrap()),
            ("--topic", topic.into()),
            ("--group", group.into()),
            ("--scenario", scenario.into()),
        ],
    );
    args(&mut c, extra);
    run_client(&format!("java share {scenario}"), c)
}

fn assert_ok(name: &str, r: &Run) {
    assert_eq!(
        r.result["ok"],
        Value::Bool(true),
        "{name}: client reported failure: {}",
        r.result
    );
    assert!(r.status.success(), "{name}: exit {}", r.status);
    assert_eq!(r.u("failures"), 0, "{name}: failures");
}

#[test]
fn share_python_implicit_consumers_on_one_partition_get_disjoint_records() {
    let _g = serial();
    deps();
    let b = Broker::start();
    let n = 5000u64;
    let r = py_share(
        &b,
        "implicit",
        "share-py-implicit",
        "g-py-implicit",
        &[
            ("--count", n.to_string()),
            ("--partitions", "1".into()),
            ("--consumers", "3".into()),
        ],
    );
    assert_ok("python share implicit", &r);
    assert_eq!(r.u("received"), n);
    assert_eq!(r.u("duplicates"), 0);
    assert_eq!(r.u("bad_delivery_counts"), 0);
    let per: Vec<u64> = r.result["per_consumer"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(
        per.iter().sum::<u64>(),
        n,
        "per-consumer counts add up to every record once: {per:?}"
    );
    assert!(
        per.iter().filter(|&&x| x > 0).count() >= 2,
        "several consumers shared the partition: {per:?}"
    );
}

#[test]
fn share_python_explicit_accept_release_reject_and_archive_at_limit() {
    let _g = serial();
    deps();
    let b = Broker::start();
    let r = py_share(
        &b,
        "explicit",
        "share-py-explicit",
        "g-py-explicit",
        &[("--count", "30".into()), ("--limit", "3".into())],
    );
    assert_ok("python share explicit", &r);
    assert_eq!(r.u("distinct"), 30);
    // 10 ACCEPT + 10 REJECT once, 10 RELEASE delivered 3 times (delivery counts 1, 2, 3), then archived
    assert_eq!(r.u("deliveries"), 10 + 10 + 10 * 3);
    assert_eq!(r.u("after_archive"), 0);
}

/// KIP-1191: REJECTed and over-limit records are copied into the group's DLQ topic, with
/// Kafka's headers and (copy.record.enable) the original key and value; nothing else is.
#[test]
fn share_python_dead_letter_queue_gets_rejected_and_over_limit_records() {
    let _g = serial();
    deps();
    let b = Broker::start();
    for copy in ["true", "false"] {
        let mut c = python("share_dlq.py");
        args(
            &mut c,
            &[
                ("--bootstrap", b.bootstrap()),
                ("--topic", format!("share-py-dlq-{copy}")),
                ("--dlq-topic", format!("dlq.share-py-dlq-{copy}")),
                ("--group", format!("g-py-dlq-{copy}")),
                ("--count", "30".into()),
                ("--limit", "2".into()),
                ("--copy", copy.into()),
            ],
        );
        let r = run_client(&format!("python share dlq copy={copy}"), c);
        assert_ok("python share dlq", &r);
        assert_eq!(r.u("consumed_distinct"), 30);
        // 10 REJECT + 10 RELEASE archived at the limit; the 10 ACCEPTed are not copied.
        assert_eq!(r.u("expected"), 20);
        assert_eq!(r.u("dlq_records"), 20);
    }
}

#[test]
fn share_python_killed_consumer_records_are_redelivered() {
    let _g = serial();
    deps();
    let b = Broker::start();
    let r = py_share(
        &b,
        "kill",
        "share-py-kill",
        "g-py-kill",
        &[("--count", "2000".into())],
    );
    assert_ok("python share kill", &r);
    assert!(r.u("held") > 0);
    assert_eq!(r.u("redelivered"), r.u("held"));
}

#[test]
fn share_java_consumers_on_one_partition_get_disjoint_records() {
    let _g = serial();
    deps();
    let b = Broker::start();
    let n = 5000u64;
    let r = java_share(
        &b,
        "accept",
        "share-java-accept",
        "g-java-accept",
        &[
            ("--count", n.to_string()),
            ("--partitions", "1".into()),
            ("--consumers", "3".into()),
        ],
    );
    assert_ok("java share accept", &r);
    assert_eq!(r.u("received"), n);
    assert_eq!(r.u("duplicates"), 0);
    assert_eq!(r.u("bad_delivery_counts"), 0);
    let per: Vec<u64> = r.result["per_consumer"]
        .as_str()
        .unwrap()
        .split(' ')
        .map(|x| x.parse().unwrap())
        .collect();
    assert_eq!(per.iter().sum::<u64>(), n, "{per:?}");
    assert!(
        per.iter().filter(|&&x| x > 0).count() >= 2,
        "several consumers shared the partition: {per:?}"
    );
}

#[test]
fn share_java_accept_release_reject_and_archive_at_limit() {
    let _g = serial();
    deps();
    let b = Broker::start();
    let r = java_share(
        &b,
        "ackmodes",
        "share-java-ackmodes",
        "g-java-ackmodes",
        &[("--count", "30".into()), ("--limit", "3".into())],
    );
    assert_ok("java share ackmodes", &r);
    assert_eq!(r.u("distinct"), 30);
    assert_eq!(r.u("deliveries"), 10 + 10 + 10 * 3);
    assert_eq!(r.u("after_archive"), 0);
}

/// Java 4.4 `KafkaShareConsumer` renewing its locks on every poll (AcknowledgeType.RENEW,
/// KIP-1222; the pattern of Flink's share-group source, FLIP-573) while each record's processing
/// (20 s) outlasts the lock (15 s, Kafka's minimum group value): no record redelivered (delivery
/// count 1 throughout), none lost (all ACCEPTed), nothing delivered again afterwards.
#[test]
fn share_java_renew_on_every_poll_while_processing_outlasts_the_lock() {
    let _g = serial();
    deps();
    let b = Broker::start();
    let n = 20u64;
    let r = java_share(
        &b,
        "renew",
        "share-java-renew",
        "g-java-renew",
        &[
            ("--count", n.to_string()),
            ("--lock-ms", "15000".into()),
            ("--process-ms", "20000".into()),
            ("--timeout", "60".into()),
        ],
    );
    assert_ok("java share renew", &r);
    assert_eq!(r.u("accepted"), n, "none lost");
    assert_eq!(r.u("redelivered"), 0, "none redelivered");
    assert_eq!(r.u("after_accept"), 0);
    assert_eq!(r.u("after_all_accepted"), 0);
    assert!(r.u("renews") > 0);
    assert!(r.u("max_held_ms") > r.u("lock_ms"), "held past the lock");
}

#[test]
fn share_acknowledgements_survive_broker_sigkill_restart() {
    let _g = serial();
    deps();
    let mut b = Broker::start();
    let (topic, group, n) = ("share-restart", "g-restart", 3000u64);
    let state = b.dir.path().join("accepted.json");
    let common = |extra: &[(&'static str, String)]| -> Vec<(&'static str, String)> {
        let mut v = vec![
            ("--count", n.to_string()),
            ("--partitions", "2".to_string()),
        ];
        v.extend(extra.iter().cloned());
        v
    };
    let p = py_share(&b, "produce", topic, group, &common(&[]));
    assert_ok("python share produce", &p);
    let d = py_share(
        &b,
        "drain",
        topic,
        group,
        &common(&[
            ("--limit", "1000".into()),
            ("--state-file", state.display().to_string()),
            base_ts(&p),
        ]),
    );
    assert_ok("python share drain 1000", &d);
    assert_eq!(d.u("accepted"), 1000);
    b.sigkill_and_restart();
    let r = py_share(
        &b,
        "rest",
        topic,
        group,
        &common(&[("--state-file", state.display().to_string()), base_ts(&p)]),
    );
    assert_ok("python share rest after SIGKILL + restart", &r);
    assert_eq!(r.u("accepted_before"), 1000);
    assert_eq!(
        r.u("redelivered_after_accept"),
        0,
        "nothing acknowledged is delivered again"
    );
    assert_eq!(
        r.u("received_now"),
        n - 1000,
        "nothing unacknowledged is lost"
    );
}

// ------------------------------------------------------------------------------------------------
// share groups: membership and sessions as Kafka 4.4

/// A second member joins while the first consumes: Kafka moves each member to the new epoch in
/// its own heartbeat and accepts the previous epoch, so nobody is fenced (the Java consumer logs a
/// fenced heartbeat at INFO; the client counts those lines) and nobody drops its assignment.
#[test]
fn share_java_second_member_joins_without_fencing_the_first() {
    let _g = serial();
    deps();
    let b = Broker::start();
    let n = 2000u64;
    let r = java_share(
        &b,
        "join",
        "share-java-join",
        "g-java-join",
        &[("--count", n.to_string()), ("--partitions", "2".into())],
    );
    assert_ok("java share join", &r);
    assert_eq!(r.u("fenced"), 0, "fenced heartbeats");
    assert_eq!(r.u("received"), n);
    assert_eq!(r.u("duplicates"), 0);
    assert!(
        r.u("consumer0_after_join") > 0,
        "the first member kept consuming after the join: {}",
        r.result
    );
}

/// librdkafka's close sends the last poll's acknowledgements (ShareAcknowledge, epoch -1)
/// alongside the leave heartbeat: they must be applied (nothing comes back) and every partition's
/// receipt must reach the acknowledgement commit callback. Three rounds: the two requests race.
#[test]
fn share_python_close_delivers_pending_acknowledgements_with_receipts() {
    let _g = serial();
    deps();
    let b = Broker::start();
    for round in 0..3 {
        let topic = format!("share-py-close-{round}");
        let r = py_share(
            &b,
            "close",
            &topic,
            &format!("g-py-close-{round}"),
            &[("--count", "200".into()), ("--partitions", "2".into())],
        );
        assert_ok(&format!("python share close, round {round}"), &r);
        assert_eq!(r.u("receipts"), 200);
        assert!(r.u("receipts_at_close") > 0);
        assert_eq!(r.u("callback_errors"), 0);
        assert_eq!(r.u("redelivered"), 0);
    }
}
