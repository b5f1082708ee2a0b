//! Share transactions end to end against a real Lockstep broker process: the `lockstep-txn` CLI
//! (`CARGO_BIN_EXE_lockstep-txn`) and the Rust client (`ShareTransactionCoordinator`,
//! `ShareConsumer::acknowledge_transactional` / `flush_transactional`).
//!
//! What it proves: the two-phase life of a transaction (begin, acknowledge → LOCKED, prepare,
//! commit / abort) as a consumer sees it (locked records are not delivered to anyone; committed
//! ones never again; aborted ones again, with the delivery count they had), the error codes and
//! idempotent answers of the wire spec, and what survives a SIGKILL of the broker (ONGOING →
//! aborted and redelivered; PREPARE → still locked and committable; COMMITTED → gone for good).
//!
//! How: each test starts its own broker (`tests/common/process.rs`: the built binary, or
//! `LOCKSTEP_BROKER_BIN`) on a free port with a temporary data directory, fills a one-partition
//! topic with the client's Admin and Producer, and kills the broker when dropped. Every wait is
//! bounded.

use std::io::Read;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use lockstep::client::admin::{Admin, NewTopic};
use lockstep::client::producer::{Producer, ProducerRecord};
use lockstep::client::share_consumer::{AckType, ShareConsumer, ShareRecord};
use lockstep::client::transactions::{recover, ShareTransactionCoordinator, TxnState};
use lockstep::client::ClientError;

const CLI_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a consumer keeps polling when the test expects it to get nothing more.
const QUIET_WAIT: Duration = Duration::from_secs(4);
/// How long a consumer may take to get records the test expects.
const DELIVERY_WAIT: Duration = Duration::from_secs(20);

mod common;

use common::process::Lockstep;

/// The broker under test (`tests/common/process.rs`): 2 shards in a temporary directory.
struct Broker(Lockstep);

impl std::ops::Deref for Broker {
    type Target = Lockstep;
    fn deref(&self) -> &Lockstep {
        &self.0
    }
}

impl std::ops::DerefMut for Broker {
    fn deref_mut(&mut self) -> &mut Lockstep {
        &mut self.0
    }
}

impl Broker {
    fn start() -> Broker {
        Broker(Lockstep::start("lockstep-txn-cli-", 2, &[]))
    }

    fn bootstrap(&self) -> String {
        self.addr()
    }
}

/// Runs the CLI with `--bootstrap` of `b`; returns exit code, stdout, stderr.
fn cli(b: &Broker, args: &[&str]) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockstep-txn"))
        .arg("--bootstrap")
        .arg(b.bootstrap())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start lockstep-txn");
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
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > CLI_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("lockstep-txn {args:?}: no exit after {CLI_TIMEOUT:?}");
        }
        thread::sleep(Duration::from_millis(20));
    };
    let (out, err) = (ho.join().unwrap(), he.join().unwrap());
    eprintln!("lockstep-txn {args:?} -> {status}\n{out}{err}");
    (status.code().unwrap_or(-1), out, err)
}

/// The CLI must succeed; returns its stdout.
fn cli_ok(b: &mut Broker, args: &[&str]) -> String {
    let (code, out, err) = cli(b, args);
    b.assert_alive();
    assert_eq!(code, 0, "lockstep-txn {args:?}: {err}");
    out
}

/// Creates a one-partition topic with `n` records "v0".. and makes `group` start at earliest.
fn setup(b: &Broker, topic: &str, group: &str, n: usize) {
    let mut admin = Admin::connect(&b.bootstrap()).unwrap();
    admin.create_topics(&[NewTopic::new(topic, 1)]).unwrap();
    admin
        .set_group_config(group, "share.auto.offset.reset", "earliest")
        .unwrap();
    let records: Vec<ProducerRecord> = (0..n)
        .map(|i| ProducerRecord::value(format!("v{i}")))
        .collect();
    Producer::new(&b.bootstrap())
        .produce(topic, 0, &records)
        .unwrap();
}

/// (offset, delivery count) of the JSON lines `consume` prints.
fn parse_consumed(out: &str) -> Vec<(i64, i64)> {
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("JSON line");
            assert_eq!(v["partition"], 0, "{l}");
            assert!(v["value"].as_str().unwrap().starts_with('v'), "{l}");
            (
                v["offset"].as_i64().unwrap(),
                v["delivery_count"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// Consumes with the CLI into `txn`; returns (offset, delivery count) of what was acknowledged.
fn cli_consume(b: &mut Broker, group: &str, topic: &str, txn: &str, n: usize) -> Vec<(i64, i64)> {
    let n = n.to_string();
    let out = cli_ok(
        b,
        &[
            "consume",
            "--group",
            group,
            "--topic",
            topic,
            "--txn",
            txn,
            "--max-records",
            &n,
            "--timeout-ms",
            "20000",
        ],
    );
    parse_consumed(&out)
}

/// A fresh member of `group` polls for `wait` (or until it holds `want` records), acknowledges
/// nothing, and leaves (its records are released). Returns (offset, delivery count).
fn peek(b: &Broker, group: &str, topic: &str, want: usize, wait: Duration) -> Vec<(i64, i16)> {
    let mut c = ShareConsumer::new(&b.bootstrap(), group);
    c.subscribe(&[topic]).unwrap();
    let deadline = Instant::now() + wait;
    let mut got = Vec::new();
    while got.len() < want && Instant::now() < deadline {
        let slice = deadline
            .saturating_duration_since(Instant::now())
            .min(Duration::from_secs(1));
        for r in c.poll(slice).unwrap() {
            got.push((r.offset, r.delivery_count));
        }
    }
    let _ = c.close();
    got.sort_unstable();
    got
}

/// Acquires `n` records with the Rust client and acknowledges them into `txn` (ACCEPT).
fn client_consume(b: &Broker, group: &str, topic: &str, txn: &str, n: usize) -> Vec<ShareRecord> {
    let mut c = ShareConsumer::new(&b.bootstrap(), group);
    c.subscribe(&[topic]).unwrap();
    let deadline = Instant::now() + DELIVERY_WAIT;
    let mut got: Vec<ShareRecord> = Vec::new();
    while got.len() < n && Instant::now() < deadline {
        for r in c.poll(Duration::from_secs(1)).unwrap() {
            if got.len() < n {
                c.acknowledge_transactional(&r, AckType::Accept, txn)
                    .unwrap();
                got.push(r);
            }
        }
    }
    assert_eq!(got.len(), n, "records acquired");
    assert_eq!(
        c.pending_acknowledgements(),
        0,
        "nothing on the explicit path"
    );
    c.flush_transactional().unwrap();
    assert!(c.pending_transactional(txn).is_empty());
    c.close().unwrap();
    got
}

fn kafka_code(e: &ClientError) -> i16 {
    e.kafka_code()
        .unwrap_or_else(|| panic!("not a Kafka error: {e}"))
}

fn list_json(b: &mut Broker, group: &str, extra: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec!["list", "--group", group, "--json"];
    args.extend_from_slice(extra);
    let out = cli_ok(b, &args);
    serde_json::from_str::<serde_json::Value>(out.trim())
        .expect("list --json")
        .as_array()
        .unwrap()
        .clone()
}

fn find<'a>(list: &'a [serde_json::Value], id: &str) -> Option<&'a serde_json::Value> {
    list.iter().find(|t| t["transaction_id"] == id)
}

#[test]
fn happy_path_begin_consume_prepare_commit_with_the_cli() {
    let mut b = Broker::start();
    let (topic, group) = ("orders", "g1");
    setup(&b, topic, group, 8);
    assert_eq!(
        cli_ok(&mut b, &["begin", "g1-flink-1", "--group", group]).trim(),
        "g1-flink-1 ONGOING"
    );
    let locked = cli_consume(&mut b, group, topic, "g1-flink-1", 5);
    assert_eq!(locked.len(), 5, "{locked:?}");
    assert!(locked.iter().all(|&(_, dc)| dc == 1));
    let locked_offsets: Vec<i64> = locked.iter().map(|&(o, _)| o).collect();

    // LOCKED: another member gets the other records, none of these.
    let other = peek(&b, group, topic, 3, DELIVERY_WAIT);
    assert!(
        other.iter().all(|(o, _)| !locked_offsets.contains(o)),
        "locked records delivered to another member: {other:?}"
    );

    let pending = list_json(&mut b, group, &[]);
    let t = find(&pending, "g1-flink-1").expect("T1 listed");
    assert_eq!(t["state"], "ONGOING");
    assert_eq!(t["locked_records"], 5);
    assert_eq!(t["partitions"][0]["locked_records"], 5);
    assert_eq!(t["prepare_time_ms"], serde_json::Value::Null);
    let table = cli_ok(&mut b, &["list", "--group", group]);
    assert!(table.starts_with("TRANSACTION"), "{table}");
    assert!(
        table.contains("g1-flink-1") && table.contains("ONGOING"),
        "{table}"
    );

    assert_eq!(
        cli_ok(&mut b, &["prepare", "g1-flink-1", "--group", group]).trim(),
        "g1-flink-1 PREPARE"
    );
    let pending = list_json(&mut b, group, &["--state", "prepare"]);
    assert_eq!(find(&pending, "g1-flink-1").unwrap()["state"], "PREPARE");
    assert_eq!(
        cli_ok(&mut b, &["commit", "g1-flink-1", "--group", group]).trim(),
        "g1-flink-1 COMMITTED"
    );

    // Never again: a fresh member sees only records outside the transaction.
    let after = peek(&b, group, topic, 8, QUIET_WAIT);
    assert!(
        after.iter().all(|(o, _)| !locked_offsets.contains(o)),
        "committed records redelivered: {after:?}"
    );
    let pending = list_json(&mut b, group, &[]);
    assert!(find(&pending, "g1-flink-1").is_none(), "{pending:?}");
    let committed = list_json(&mut b, group, &["--state", "committed"]);
    assert_eq!(
        find(&committed, "g1-flink-1").unwrap()["state"],
        "COMMITTED"
    );
    // Begin of a finished id is idempotent: it reports the state.
    assert_eq!(
        cli_ok(&mut b, &["begin", "g1-flink-1", "--group", group]).trim(),
        "g1-flink-1 COMMITTED"
    );
}

#[test]
fn abort_redelivers_with_the_same_delivery_count() {
    let b = Broker::start();
    let (topic, group) = ("events", "g2");
    setup(&b, topic, group, 4);
    let mut coord = ShareTransactionCoordinator::new(&b.bootstrap(), group);
    assert_eq!(coord.begin("g2-t-2", 60_000).unwrap(), TxnState::Ongoing);
    let acked = client_consume(&b, group, topic, "g2-t-2", 4);
    let before: Vec<(i64, i16)> = acked.iter().map(|r| (r.offset, r.delivery_count)).collect();
    assert!(peek(&b, group, topic, 4, QUIET_WAIT).is_empty(), "locked");
    assert_eq!(coord.abort("g2-t-2").unwrap(), TxnState::Aborted);
    let again = peek(&b, group, topic, 4, DELIVERY_WAIT);
    assert_eq!(again, before, "abort must not consume a delivery attempt");
    // Abort is idempotent.
    assert_eq!(coord.abort("g2-t-2").unwrap(), TxnState::Aborted);
}

#[test]
fn idempotency_and_error_codes() {
    let mut b = Broker::start();
    let (topic, group) = ("errs", "g3");
    setup(&b, topic, group, 2);
    let mut coord = ShareTransactionCoordinator::new(&b.bootstrap(), group);
    assert_eq!(coord.begin("g3-a-1", -1).unwrap(), TxnState::Ongoing);
    assert_eq!(coord.begin("g3-a-1", -1).unwrap(), TxnState::Ongoing);
    // Commit from ONGOING.
    let e = coord.commit("g3-a-1").unwrap_err();
    assert_eq!(kafka_code(&e), 48, "{e}");
    // Wrong group prefix.
    let e = coord.begin("other-a-1", -1).unwrap_err();
    assert_eq!(kafka_code(&e), 42, "{e}");
    // Unknown id.
    let e = coord.prepare("g3-never-1").unwrap_err();
    assert_eq!(kafka_code(&e), 105, "{e}");
    // share.transaction.max.pending = 5: g3-a-1 plus four more, then the sixth is refused.
    for i in 2..=5 {
        assert_eq!(
            coord.begin(&format!("g3-a-{i}"), -1).unwrap(),
            TxnState::Ongoing
        );
    }
    let e = coord.begin("g3-a-6", -1).unwrap_err();
    assert_eq!(kafka_code(&e), 51, "{e}");
    let (code, _, err) = cli(&b, &["begin", "g3-a-6", "--group", group]);
    assert_eq!(code, 1);
    assert!(err.contains("CONCURRENT_TRANSACTIONS (51)"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    // Abort after commit answers COMMITTED without error.
    assert_eq!(coord.prepare("g3-a-1").unwrap(), TxnState::Prepare);
    assert_eq!(coord.prepare("g3-a-1").unwrap(), TxnState::Prepare);
    assert_eq!(coord.commit("g3-a-1").unwrap(), TxnState::Committed);
    assert_eq!(coord.commit("g3-a-1").unwrap(), TxnState::Committed);
    assert_eq!(coord.abort("g3-a-1").unwrap(), TxnState::Committed);
    assert_eq!(
        cli_ok(&mut b, &["abort", "g3-a-1", "--group", group]).trim(),
        "g3-a-1 COMMITTED"
    );
    // The recovery routine aborts the rest (all ONGOING).
    let report = recover(&mut coord, |_| true).unwrap();
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    assert!(report.committed.is_empty());
    assert_eq!(report.aborted.len(), 4, "{report:?}");
    assert!(coord.list_pending().unwrap().is_empty());
}

/// Errors that need no transaction to exist: they work even with the broker bug above.
#[test]
fn unknown_transaction_ids_and_usage_errors() {
    let b = Broker::start();
    let group = "g4";
    let mut coord = ShareTransactionCoordinator::new(&b.bootstrap(), group);
    for e in [
        coord.prepare("g4-never-1").unwrap_err(),
        coord.commit("g4-never-1").unwrap_err(),
    ] {
        assert_eq!(kafka_code(&e), 105, "{e}");
    }
    let (code, out, err) = cli(&b, &["prepare", "g4-never-1", "--group", group]);
    assert_eq!(code, 1, "{out}");
    assert!(
        err.starts_with("lockstep-txn: TRANSACTIONAL_ID_NOT_FOUND (105)"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    // Usage errors exit 2.
    assert_eq!(cli(&b, &["prepare", "g4-x"]).0, 2);
    assert_eq!(
        cli(&b, &["list", "--group", group, "--state", "bogus"]).0,
        2
    );
    assert_eq!(cli(&b, &["frobnicate"]).0, 2);
}

#[test]
fn crash_with_an_ongoing_transaction_aborts_it_and_redelivers() {
    let mut b = Broker::start();
    let (topic, group) = ("crash-a", "g5");
    setup(&b, topic, group, 3);
    cli_ok(&mut b, &["begin", "g5-c-1", "--group", group]);
    let locked = cli_consume(&mut b, group, topic, "g5-c-1", 3);
    assert_eq!(locked.len(), 3);
    b.sigkill_and_restart();
    let aborted = list_json(&mut b, group, &["--state", "aborted"]);
    assert_eq!(
        find(&aborted, "g5-c-1").map(|t| t["state"].clone()),
        Some("ABORTED".into()),
        "{aborted:?}"
    );
    assert!(find(&list_json(&mut b, group, &[]), "g5-c-1").is_none());
    let again = peek(&b, group, topic, 3, DELIVERY_WAIT);
    let offsets: Vec<i64> = again.iter().map(|&(o, _)| o).collect();
    assert_eq!(
        offsets,
        locked.iter().map(|&(o, _)| o).collect::<Vec<_>>(),
        "redelivered after the crash"
    );
}

#[test]
fn crash_after_prepare_keeps_locks_and_commit_completes() {
    let mut b = Broker::start();
    let (topic, group) = ("crash-b", "g6");
    setup(&b, topic, group, 3);
    let mut coord = ShareTransactionCoordinator::new(&b.bootstrap(), group);
    coord.begin("g6-c-1", 60_000).unwrap();
    client_consume(&b, group, topic, "g6-c-1", 3);
    assert_eq!(coord.prepare("g6-c-1").unwrap(), TxnState::Prepare);
    b.sigkill_and_restart();
    let pending = list_json(&mut b, group, &[]);
    let t = find(&pending, "g6-c-1").expect("prepared transaction survives");
    assert_eq!(t["state"], "PREPARE");
    assert_eq!(t["locked_records"], 3);
    assert!(
        peek(&b, group, topic, 3, QUIET_WAIT).is_empty(),
        "prepared records delivered after restart"
    );
    // The recovery routine commits it: its checkpoint is committed in the sink.
    let mut coord = ShareTransactionCoordinator::new(&b.bootstrap(), group);
    let report = recover(&mut coord, |id| id == "g6-c-1").unwrap();
    assert_eq!(report.committed, vec!["g6-c-1".to_string()]);
    assert!(report.aborted.is_empty() && report.failed.is_empty());
    assert!(
        peek(&b, group, topic, 3, QUIET_WAIT).is_empty(),
        "committed"
    );
    b.sigkill_and_restart();
    assert!(
        peek(&b, group, topic, 3, QUIET_WAIT).is_empty(),
        "committed"
    );
}

#[test]
fn crash_after_commit_never_redelivers() {
    let mut b = Broker::start();
    let (topic, group) = ("crash-c", "g7");
    setup(&b, topic, group, 3);
    cli_ok(&mut b, &["begin", "g7-c-1", "--group", group]);
    assert_eq!(cli_consume(&mut b, group, topic, "g7-c-1", 3).len(), 3);
    cli_ok(&mut b, &["prepare", "g7-c-1", "--group", group]);
    cli_ok(&mut b, &["commit", "g7-c-1", "--group", group]);
    b.sigkill_and_restart();
    assert!(peek(&b, group, topic, 3, QUIET_WAIT).is_empty());
    let committed = list_json(&mut b, group, &["--state", "committed"]);
    assert_eq!(find(&committed, "g7-c-1").unwrap()["state"], "COMMITTED");
}

#[test]
fn refused_transactional_acknowledgements_are_kept_for_a_retry() {
    let b = Broker::start();
    let (topic, group) = ("refused", "g8");
    setup(&b, topic, group, 2);
    let mut coord = ShareTransactionCoordinator::new(&b.bootstrap(), group);
    coord.begin("g8-p-1", 60_000).unwrap();
    assert_eq!(coord.prepare("g8-p-1").unwrap(), TxnState::Prepare);
    coord.begin("g8-p-2", 60_000).unwrap();
    let mut c = ShareConsumer::new(&b.bootstrap(), group);
    c.subscribe(&[topic]).unwrap();
    let deadline = Instant::now() + DELIVERY_WAIT;
    let mut got = Vec::new();
    while got.len() < 2 && Instant::now() < deadline {
        got.extend(c.poll(Duration::from_secs(1)).unwrap());
    }
    assert_eq!(got.len(), 2);
    // Into a transaction that is not ONGOING: INVALID_TXN_STATE, the acks stay buffered.
    c.acknowledge_transactional(&got[0], AckType::Accept, "g8-p-1")
        .unwrap();
    let e = c.flush_transactional().unwrap_err();
    assert_eq!(kafka_code(&e), 48, "{e}");
    assert_eq!(c.pending_transactional("g8-p-1").len(), 1);
    // RELEASE inside a transaction: INVALID_REQUEST (the other buffer is kept too).
    c.acknowledge_transactional(&got[1], AckType::Release, "g8-p-2")
        .unwrap();
    let e = c.flush_transactional().unwrap_err();
    assert!(matches!(kafka_code(&e), 42 | 48), "{e}");
    assert_eq!(c.pending_transactional("g8-p-2").len(), 1);
    assert_eq!(c.pending_transactional("g8-p-1").len(), 1);
    assert_eq!(c.pending_acknowledgements(), 0);
    c.close().unwrap();
}
