//! The read path without `pread`: ops run through the production shard core
//! (`ShardExec::execute`) on the deterministic shard I/O of `tests/common/sim.rs`, whose
//! read-ahead reads the storage double's written bytes, and every read of the partition logs
//! finds its bytes in memory: no fallback `pread` (`PartitionLog::file_reads` does not move).
//! One test per case the read-ahead used to miss: a ShareFetch creating its share partitions
//! (MinBytes 0 and 1); a ShareFetch whose releases make records below its share partitions'
//! next fetch offsets available (their bytes dropped from memory meanwhile); the DLQ copy of
//! rejected records (the copy carries the record read); a Fetch over more logs than a shard
//! keeps read ahead; a Fetch whose data a flush moves out of the tail while its read-ahead
//! runs. The partitions' data is on the files: 1.6 MiB each, with 1 MiB segments.

mod common;

use bytes::Bytes;
use common::sim::World;
use lockstep::journal::{Journal, JournalConfig};
use lockstep::log::batch::BatchBuilder;
use lockstep::model::{ShardId, TopicPartition};
use lockstep::shard::exec::ShardExec;
use lockstep::shard::ops::{
    FetchOp, FetchPartitionOp, PartitionRef, ProduceOp, ShardOp, ShardReply, ShareAckOp,
    ShareFetchOp, ShareFetchReply,
};
use lockstep::shard::registry::TopicRegistry;
use lockstep::shard::state::ShardState;
use lockstep::shard::ShardCore;
use lockstep::share::{AckBatch, AcknowledgeType};
use lockstep::storage::file::SimStorage;
use lockstep::storage::mmap::MemDir;
use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use uuid::Uuid;

const TOPIC: &str = "t";
const DLQ: &str = "dlq.t";
const GROUP: &str = "g";
/// A group whose share partitions start at the first record at most an hour old (all of them).
const GROUP_BY_DURATION: &str = "g-by-duration";
const MEMBER: &str = "m";
/// More than a shard keeps read ahead (`SHARD_READ_CACHE_LOGS_MAX`).
const PARTITIONS: i32 = 12;
const BATCHES: i64 = 100;
const RECORDS_PER_BATCH: i64 = 10;
const VALUE_BYTES: usize = 1_600;

fn registry() -> Arc<TopicRegistry> {
    let mut r = TopicRegistry::new("sim".into());
    let segments = [("segment.bytes".to_string(), Some((1 << 20).to_string()))];
    r.create_topic(TOPIC, Uuid::from_u128(1), PARTITIONS, &segments)
        .unwrap();
    let dlq = [(
        "errors.deadletterqueue.group.enable".to_string(),
        Some("true".to_string()),
    )];
    r.create_topic(DLQ, Uuid::from_u128(2), 1, &dlq).unwrap();
    r.set_group_configs(
        GROUP,
        [
            ("share.auto.offset.reset", "earliest"),
            ("errors.deadletterqueue.topic.name", DLQ),
            ("errors.deadletterqueue.copy.record.enable", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    )
    .unwrap();
    r.set_group_configs(
        GROUP_BY_DURATION,
        [("share.auto.offset.reset", "by_duration:PT1H")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
    .unwrap();
    Arc::new(r)
}

fn pref(partition: i32) -> PartitionRef {
    PartitionRef {
        topic: TOPIC.into(),
        topic_id: Uuid::from_u128(1),
        partition,
    }
}

fn key(partition: i32) -> TopicPartition {
    pref(partition).key()
}

fn value(offset: i64) -> Vec<u8> {
    let mut v = format!("v{offset}-").into_bytes();
    v.resize(VALUE_BYTES, b'.');
    v
}

/// Appends `batches` batches of `RECORDS_PER_BATCH` records to `partition` (not flushed).
fn append(state: &mut ShardState<SimStorage>, partition: i32, batches: i64) {
    for _ in 0..batches {
        let base = state
            .partition(&key(partition))
            .unwrap()
            .log
            .log_end_offset() as i64;
        let mut b = BatchBuilder::new(1_000);
        for i in 0..RECORDS_PER_BATCH {
            b.record(1_000, None, Some(&value(base + i)));
        }
        let applied = state.produce(
            &ProduceOp {
                partition: pref(partition),
                records: Bytes::from(b.build()),
                acks: -1,
                timeout_ms: 1_000,
                verification_guard: None,
            },
            0,
        );
        assert_eq!(applied.result.error, None);
    }
}

fn world(seed: u64) -> Rc<World> {
    let storage = SimStorage::new();
    let (mut state, _) = ShardState::open(
        ShardId(0),
        1,
        Path::new("/data"),
        storage.clone(),
        registry(),
        0,
    )
    .unwrap();
    for p in 0..PARTITIONS {
        append(&mut state, p, BATCHES);
        let log = &mut state.partition_mut(&key(p)).unwrap().log;
        log.flush().unwrap();
        assert!(log.segment_count() >= 2, "a sealed segment, on the file");
    }
    let (journal, _) = Journal::open(
        MemDir::new("/journal-0"),
        JournalConfig {
            segment_bytes: 64 * 1024,
            snapshot_chunk_bytes: 16 * 1024,
        },
    )
    .unwrap();
    let world = World::new(
        seed,
        1_000,
        vec![Rc::new(ShardCore::new(state, journal))],
        storage,
    );
    world.read_ahead_fails.set(false);
    world
}

fn execute(world: &Rc<World>, op: ShardOp) -> ShardReply {
    let io = world.io(0);
    let reply = world.run(async move { io.execute(op).await });
    world.settle();
    reply
}

/// Fallback reads of the topic's logs so far.
fn file_reads(world: &Rc<World>) -> u64 {
    let io = world.io(0);
    let state = io.state.borrow();
    (0..PARTITIONS).map(|p| state.log_file_reads(&key(p))).sum()
}

fn drop_read_cache(world: &Rc<World>, partition: i32) {
    let io = world.io(0);
    let mut state = io.state.borrow_mut();
    state
        .partition_mut(&key(partition))
        .unwrap()
        .log
        .drop_read_cache();
}

fn share_fetch(
    world: &Rc<World>,
    partitions: &[i32],
    min_bytes: usize,
    acks: Vec<(i32, AckBatch)>,
) -> ShareFetchReply {
    share_fetch_in(world, GROUP, partitions, min_bytes, acks)
}

fn share_fetch_in(
    world: &Rc<World>,
    group: &str,
    partitions: &[i32],
    min_bytes: usize,
    acks: Vec<(i32, AckBatch)>,
) -> ShareFetchReply {
    let acknowledge = (!acks.is_empty()).then(|| ShareAckOp {
        group_id: group.into(),
        member_id: MEMBER.into(),
        partitions: acks.into_iter().map(|(p, b)| (pref(p), vec![b])).collect(),
    });
    let op = ShareFetchOp {
        group_id: group.into(),
        member_id: MEMBER.into(),
        partitions: partitions.iter().map(|&p| pref(p)).collect(),
        max_records: 100,
        batch_size: 100,
        record_limit: false,
        partition_max_bytes: 1 << 20,
        min_one_batch: true,
        acquire_created: true,
        acknowledge,
        min_bytes,
        wait_durable: true,
    };
    match execute(world, ShardOp::ShareFetch(op)) {
        ShardReply::ShareFetched(reply) => {
            assert!(reply.acknowledged.iter().all(|a| a.error.is_none()));
            reply
        }
        other => panic!("{other:?}"),
    }
}

/// The first and last offsets acquired from the op's first partition.
fn acquired(reply: &ShareFetchReply) -> (i64, i64) {
    let p = &reply.partitions[0];
    assert_eq!(p.error, None, "{:?}", p.error_message);
    let first = p.acquired.first().expect("records acquired").first;
    (first, p.acquired.last().unwrap().last)
}

fn fetch(partitions: &[(i32, i64)], max_bytes: usize) -> ShardOp {
    ShardOp::Fetch(FetchOp {
        partitions: partitions
            .iter()
            .map(|&(p, offset)| FetchPartitionOp {
                partition: pref(p),
                fetch_offset: offset,
                max_bytes,
            })
            .collect(),
        max_bytes: 64 << 20,
        read_committed: false,
    })
}

#[test]
fn a_share_fetch_creating_its_share_partitions_reads_them_ahead() {
    for group in [GROUP, GROUP_BY_DURATION] {
        for min_bytes in [0, 1] {
            let world = world(1);
            let reply = share_fetch_in(&world, group, &[0, 1], min_bytes, Vec::new());
            assert_eq!(acquired(&reply).0, 0, "{group}: from the first record");
            assert!(reply.partitions.iter().all(|p| p.created || min_bytes > 0));
            assert_eq!(file_reads(&world), 0, "{group}, MinBytes {min_bytes}");
            world.exec.clear();
        }
    }
}

#[test]
fn releases_in_a_share_fetch_are_read_ahead_from_the_lowest_available_offset() {
    for min_bytes in [0, 1] {
        let world = world(2);
        let (first, last) = acquired(&share_fetch(&world, &[0], 1, Vec::new()));
        assert_eq!(first, 0);
        // The bytes of the records go from memory (another op's read-ahead took the room).
        drop_read_cache(&world, 0);
        let before = file_reads(&world);
        let release = AckBatch::new(first, last, AcknowledgeType::Release);
        let reply = share_fetch(&world, &[0], min_bytes, vec![(0, release)]);
        assert_eq!(acquired(&reply).0, 0, "the released records again");
        assert_eq!(reply.partitions[0].acquired[0].delivery_count, 2);
        assert_eq!(file_reads(&world) - before, 0, "MinBytes {min_bytes}");
        assert_eq!(before, 0);
        world.exec.clear();
    }
}

#[test]
fn dlq_copies_read_their_records_ahead() {
    let world = world(3);
    let (first, _) = acquired(&share_fetch(&world, &[0], 1, Vec::new()));
    drop_read_cache(&world, 0);
    let before = file_reads(&world);
    let reject = AckBatch::new(first, first + 4, AcknowledgeType::Reject);
    let reply = execute(
        &world,
        ShardOp::ShareAcknowledge(ShareAckOp {
            group_id: GROUP.into(),
            member_id: MEMBER.into(),
            partitions: vec![(pref(0), vec![reject])],
        }),
    );
    match reply {
        ShardReply::ShareAcknowledged(results) => assert!(results[0].error.is_none()),
        other => panic!("{other:?}"),
    }
    assert_eq!(file_reads(&world) - before, 0);
    assert_eq!(before, 0);
    // The copies carry the records' values.
    let io = world.io(0);
    let state = io.state.borrow();
    let dlq = PartitionRef {
        topic: DLQ.into(),
        topic_id: Uuid::from_u128(2),
        partition: 0,
    };
    let log = &state.partition(&dlq.key()).unwrap().log;
    assert_eq!(log.log_end_offset(), 5);
    let read = log.read(0, usize::MAX).unwrap();
    for i in 0..5 {
        let (_, v) = lockstep::shard::share_dlq::find_record(&read.records, i).unwrap();
        assert_eq!(v.unwrap(), Bytes::from(value(first + i)));
    }
    drop(state);
    world.exec.clear();
}

#[test]
fn a_fetch_over_more_logs_than_the_shard_keeps_read_ahead_keeps_its_own() {
    let world = world(4);
    let all: Vec<(i32, i64)> = (0..PARTITIONS).map(|p| (p, 0)).collect();
    match execute(&world, fetch(&all, 1 << 20)) {
        ShardReply::Fetch(parts) => {
            assert!(parts
                .iter()
                .all(|p| p.error.is_none() && p.records.len() > 900_000))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(file_reads(&world), 0);
    world.exec.clear();
}

/// The fetch plans while its data is in the active segment's in-memory tail; a flush of 400
/// KiB more completes during its read-ahead and drops that part of the tail; the fetch plans
/// again and reads it ahead too.
#[test]
fn a_fetch_reads_ahead_again_what_a_flush_moved_out_of_the_tail_meanwhile() {
    for seed in 0..20 {
        let world = world(seed);
        let io = world.io(0);
        // The last batch of the sealed segment (on the file), then the active segment (tail).
        let offset = {
            let state = io.state.borrow();
            let segments = state.partition(&key(0)).unwrap().log.segments();
            segments[0].next_offset as i64 - RECORDS_PER_BATCH
        };
        append(&mut io.state.borrow_mut(), 0, 25);
        let slot: Rc<RefCell<Option<ShardReply>>> = Rc::new(RefCell::new(None));
        let out = slot.clone();
        let op = fetch(&[(0, offset)], 2 << 20);
        let task = io.clone();
        world.exec.spawn(async move {
            let reply = task.execute(op).await;
            *out.borrow_mut() = Some(reply);
        });
        // One poll: the fetch planned and waits for its read-ahead.
        world.exec.run_until_or_budget(|| false, 1);
        assert!(slot.borrow().is_none());
        {
            let mut state = io.state.borrow_mut();
            let log = &mut state.partition_mut(&key(0)).unwrap().log;
            log.flush().unwrap();
        }
        world.exec.run_until(|| slot.borrow().is_some());
        match slot.borrow_mut().take().unwrap() {
            ShardReply::Fetch(parts) => assert!(parts[0].records.len() > 900_000),
            other => panic!("{other:?}"),
        }
        assert_eq!(file_reads(&world), 0, "seed {seed}");
        world.exec.clear();
    }
}
