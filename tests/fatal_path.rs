//! The fatal path (`runtime::fatal`), with real processes: a shard that panics ends the whole
//! broker at once with `EXIT_SHARD_PANICKED` and a message naming the shard (no half-alive
//! broker whose calls to the dead shard wait forever), and a restart on the same data recovers
//! everything that was acknowledged durable before.
//!
//! How: `lockstep --shards 2 --test-fault panic-shard=1,after-ms=M` (the hidden, test-only
//! hook: shard 1 panics M ms after it is ready). Before the fault fires the test creates a
//! topic whose partitions cover both shards and produces 10 records (acks=all) to each; it then
//! waits for the exit, which must come within a second of the fault. The broker is started
//! again without the fault, and a produce to each partition must land at offset 10: every
//! acknowledged record was recovered, nothing more.
//!
//! The other half of the fatal path — a journal append that fails poisons the journal — is a
//! unit test of `Journal::append_all` (`src/journal/mod.rs`), on the storage crash double.

mod common;

use common::process::Lockstep;
use lockstep::client::admin::{Admin, NewTopic};
use lockstep::client::producer::{Producer, ProducerRecord};
use lockstep::constants::EXIT_SHARD_PANICKED;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

/// When shard 1 panics, after the broker is ready: time enough to create a topic and produce.
const FAULT_AFTER_MS: u64 = 4_000;
/// The broker must be gone this soon after the fault fires.
const EXIT_WITHIN: Duration = Duration::from_secs(1);

const TOPIC: &str = "fatal-path";
const PARTITIONS: i32 = 4;
const RECORDS: usize = 10;

fn produce(addr: &str, partition: i32, count: usize) -> i64 {
    let records: Vec<ProducerRecord> = (0..count)
        .map(|i| ProducerRecord::value(format!("record-{partition}-{i}").into_bytes()))
        .collect();
    Producer::new(addr)
        .produce(TOPIC, partition, &records)
        .unwrap_or_else(|e| panic!("produce to {TOPIC}-{partition}: {e}"))
}

#[test]
fn a_shard_panic_ends_the_process_and_a_restart_recovers() {
    let fault = format!("panic-shard=1,after-ms={FAULT_AFTER_MS}");
    let mut broker = Lockstep::start("lockstep-fatal-", 2, &["--test-fault", &fault]);
    let fires_at = broker.ready_at + Duration::from_millis(FAULT_AFTER_MS);

    let mut admin = Admin::connect(&broker.addr()).expect("admin connection");
    admin
        .create_topics(&[NewTopic::new(TOPIC, PARTITIONS)])
        .expect("create the topic");
    for partition in 0..PARTITIONS {
        assert_eq!(produce(&broker.addr(), partition, RECORDS), 0);
    }
    assert!(
        Instant::now() < fires_at,
        "setup took longer than the fault delay; the test proves nothing"
    );

    let waited = fires_at.saturating_duration_since(Instant::now()) + EXIT_WITHIN;
    let status = broker
        .wait_exit(waited)
        .unwrap_or_else(|| panic!("the broker still runs 1 s after its shard panicked"));
    let exited_at = Instant::now();
    assert!(
        exited_at <= fires_at + EXIT_WITHIN,
        "exited {:?} after the fault",
        exited_at - fires_at
    );
    assert_eq!(
        status.code(),
        Some(EXIT_SHARD_PANICKED),
        "status {status} (signal {:?})",
        status.signal()
    );
    let log = broker.log(1);
    assert!(
        log.contains("lockstep: fatal: a shard panicked on shard-1"),
        "no fatal message in the log:\n{log}"
    );

    // Recovery: the same data, no fault.
    broker.spawn(&[]);
    for partition in 0..PARTITIONS {
        assert_eq!(
            produce(&broker.addr(), partition, 1),
            RECORDS as i64,
            "partition {partition}: the acknowledged records were not all recovered"
        );
    }
}
