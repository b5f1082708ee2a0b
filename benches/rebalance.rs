//! The rebalance benchmark (not a timed test): how long a classic consumer group takes to
//! rebalance with 1, 10 and 100 members, on Lockstep (the release binary) and on Apache Kafka 4.4
//! (started by the bench with its own data directory on a free port, with
//! `group.initial.rebalance.delay.ms=0` as Kafka's own test configurations use, so that Kafka does
//! not hold the first rebalance for its default 3 s).
//!
//! Members are raw-protocol clients (requests encoded with the `kafka-protocol` crate), one
//! blocking thread each: JoinGroup v9 (with the MEMBER_ID_REQUIRED round trip), SyncGroup v5 (the
//! leader computes a range assignment of a 100-partition topic), Heartbeat v4 every
//! `HEARTBEAT_INTERVAL` (a member that learns REBALANCE_IN_PROGRESS rejoins), LeaveGroup v5. For
//! each N, on a fresh group, three phases are measured:
//!
//! - initial: from the first JoinGroup until all N members have their SyncGroup assignment of
//!   one generation;
//! - join: from one extra member's JoinGroup until all N+1 have synced the next generation;
//! - leave: from one member's LeaveGroup (when it is sent) until the other N have synced the
//!   next generation.
//!
//! The join and leave phases are bounded below by how soon the other members heartbeat (they
//! learn of the rebalance only then), so they measure the heartbeat interval as much as the
//! coordinator; members that synced together heartbeat in step.
//!
//! Each synced generation is checked: every partition assigned exactly once. Each N is repeated
//! `REPEATS` times; the table gives median and max, `target/bench-reports/rebalance.json` every
//! sample. `cargo bench --bench rebalance` runs both brokers (`-- --no-kafka`: Lockstep only;
//! Kafka is skipped if not installed); under `cargo test` only N=1 and N=3 run against Lockstep.

#[path = "common/mod.rs"]
mod common;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use common::brokers::{kafka_available, Broker, Kind, LockstepOptions};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use serde::Serialize;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const TOPIC: &str = "rebalance-bench";
const PARTITIONS: i32 = 100;
const REPEATS: usize = 3;
const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);
const SESSION_TIMEOUT_MS: i32 = 10_000;
const REBALANCE_TIMEOUT_MS: i32 = 30_000;
/// Socket timeout: longer than a rebalance may hold a JoinGroup.
const IO_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on any one phase.
const PHASE_WITHIN: Duration = Duration::from_secs(120);
const MEMBER_ID_REQUIRED: i16 = 79;
const REBALANCE_IN_PROGRESS: i16 = 27;
const UNKNOWN_MEMBER_ID: i16 = 25;
const ILLEGAL_GENERATION: i16 = 22;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const NOT_COORDINATOR: i16 = 16;

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn progress(what: &str) {
    eprintln!("[rebalance bench] {what}");
}

// ---------------------------------------------------------------------------------------------
// One blocking connection

struct Conn {
    stream: TcpStream,
    correlation: i32,
}

impl Conn {
    fn connect(port: u16) -> Result<Conn, String> {
        let stream =
            TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(IO_TIMEOUT))
            .map_err(|e| e.to_string())?;
        stream
            .set_write_timeout(Some(IO_TIMEOUT))
            .map_err(|e| e.to_string())?;
        Ok(Conn {
            stream,
            correlation: 0,
        })
    }

    fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Result<Resp, String> {
        self.correlation += 1;
        let mut header = RequestHeader::default();
        header.request_api_key = key as i16;
        header.request_api_version = version;
        header.correlation_id = self.correlation;
        header.client_id = Some(sb("lockstep-rebalance-bench"));
        let mut buf = BytesMut::new();
        header
            .encode(&mut buf, key.request_header_version(version))
            .map_err(|e| format!("{key:?}: encode header: {e}"))?;
        request
            .encode(&mut buf, version)
            .map_err(|e| format!("{key:?}: encode: {e}"))?;
        let mut frame = Vec::with_capacity(buf.len() + 4);
        frame.extend_from_slice(&(buf.len() as i32).to_be_bytes());
        frame.extend_from_slice(&buf);
        self.stream
            .write_all(&frame)
            .map_err(|e| format!("{key:?}: write: {e}"))?;
        let mut size = [0u8; 4];
        self.stream
            .read_exact(&mut size)
            .map_err(|e| format!("{key:?}: read: {e}"))?;
        let size = i32::from_be_bytes(size);
        if !(0..=(64 << 20)).contains(&size) {
            return Err(format!("{key:?}: response frame of {size} bytes"));
        }
        let mut body = vec![0u8; size as usize];
        self.stream
            .read_exact(&mut body)
            .map_err(|e| format!("{key:?}: read: {e}"))?;
        let mut body = Bytes::from(body);
        let header = ResponseHeader::decode(&mut body, key.response_header_version(version))
            .map_err(|e| format!("{key:?}: response header: {e}"))?;
        if header.correlation_id != self.correlation {
            return Err(format!("{key:?}: correlation id {}", header.correlation_id));
        }
        Resp::decode(&mut body, version).map_err(|e| format!("{key:?} v{version}: {e}"))
    }
}

/// Creates the topic (an existing one is fine) and waits until the broker coordinates `group`
/// (a fresh Kafka answers COORDINATOR_NOT_AVAILABLE until its offsets topic is loaded); the
/// coordinator's port.
fn prepare(port: u16, group: &str) -> Result<u16, String> {
    let mut conn = Conn::connect(port)?;
    let mut topic = create_topics_request::CreatableTopic::default();
    topic.name = TopicName(sb(TOPIC));
    topic.num_partitions = PARTITIONS;
    topic.replication_factor = 1;
    let mut create = CreateTopicsRequest::default();
    create.topics = vec![topic];
    create.timeout_ms = 30_000;
    let response: CreateTopicsResponse = conn.call(ApiKey::CreateTopics, 7, &create)?;
    let code = response.topics.first().map_or(-1, |t| t.error_code);
    // 36: TOPIC_ALREADY_EXISTS.
    if code != 0 && code != 36 {
        return Err(format!("CreateTopics {TOPIC}: error {code}"));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut find = FindCoordinatorRequest::default();
        find.key_type = 0;
        find.coordinator_keys = vec![sb(group)];
        let response: FindCoordinatorResponse = conn.call(ApiKey::FindCoordinator, 4, &find)?;
        let c = response
            .coordinators
            .first()
            .ok_or("FindCoordinator: empty")?;
        match c.error_code {
            0 => {
                wait_loaded(&mut conn, group, deadline)?;
                return Ok(c.port as u16);
            }
            COORDINATOR_NOT_AVAILABLE | COORDINATOR_LOAD_IN_PROGRESS
                if Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(200))
            }
            e => return Err(format!("FindCoordinator {group}: error {e}")),
        }
    }
}

/// Waits until DescribeGroups of `group` stops answering COORDINATOR_LOAD_IN_PROGRESS,
/// NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE (Kafka loads its offsets partitions after it answers
/// FindCoordinator), so that loading is not measured as rebalance time.
fn wait_loaded(conn: &mut Conn, group: &str, deadline: Instant) -> Result<(), String> {
    loop {
        let mut describe = DescribeGroupsRequest::default();
        describe.groups = vec![GroupId(sb(group))];
        let response: DescribeGroupsResponse = conn.call(ApiKey::DescribeGroups, 5, &describe)?;
        let code = response.groups.first().map_or(-1, |g| g.error_code);
        match code {
            COORDINATOR_NOT_AVAILABLE | COORDINATOR_LOAD_IN_PROGRESS | NOT_COORDINATOR
                if Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(200))
            }
            0 => return Ok(()),
            e => return Err(format!("DescribeGroups {group}: error {e}")),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Consumer protocol bytes (ConsumerProtocolSubscription v0, ConsumerProtocolAssignment v0)

fn subscription() -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(1);
    b.put_i16(TOPIC.len() as i16);
    b.put_slice(TOPIC.as_bytes());
    b.put_i32(-1);
    b.freeze()
}

fn assignment(partitions: &[i32]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i32(1);
    b.put_i16(TOPIC.len() as i16);
    b.put_slice(TOPIC.as_bytes());
    b.put_i32(partitions.len() as i32);
    for &p in partitions {
        b.put_i32(p);
    }
    b.put_i32(-1);
    b.freeze()
}

/// The partitions of an assignment; None if it does not parse.
fn parse_assignment(mut b: Bytes) -> Option<Vec<i32>> {
    let mut out = Vec::new();
    if b.remaining() < 6 {
        return None;
    }
    b.get_i16();
    let topics = b.get_i32();
    for _ in 0..topics {
        let len = b.get_i16() as usize;
        if b.remaining() < len + 4 {
            return None;
        }
        b.advance(len);
        let n = b.get_i32() as usize;
        if b.remaining() < n * 4 {
            return None;
        }
        for _ in 0..n {
            out.push(b.get_i32());
        }
    }
    Some(out)
}

/// Range assignment: members sorted by id, each a contiguous run of partitions.
fn range_assign(members: &mut [StrBytes]) -> Vec<(StrBytes, Bytes)> {
    members.sort();
    let n = members.len() as i32;
    let (each, extra) = (PARTITIONS / n, PARTITIONS % n);
    let mut next = 0;
    members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let count = each + i32::from((i as i32) < extra);
            let parts: Vec<i32> = (next..next + count).collect();
            next += count;
            (m.clone(), assignment(&parts))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Members

/// What the members report to the measuring thread.
#[derive(Default)]
struct Shared {
    /// Per member (by index): (generation, when synced, partitions assigned); None before its
    /// first sync and after it left.
    synced: Vec<Option<(i32, Instant, Vec<i32>)>>,
    /// First member error, which fails the run.
    error: Option<String>,
    /// When the last leaving member sent its LeaveGroup (the leave phase's start).
    leave_sent: Option<Instant>,
}

struct Group {
    port: u16,
    group: String,
    shared: Arc<(Mutex<Shared>, Condvar)>,
    stop: Arc<AtomicBool>,
    threads: Vec<(Arc<AtomicBool>, std::thread::JoinHandle<()>)>,
}

impl Group {
    fn new(port: u16, group: String) -> Group {
        Group {
            port,
            group,
            shared: Arc::default(),
            stop: Arc::default(),
            threads: Vec::new(),
        }
    }

    /// Starts one member thread.
    fn add(&mut self) {
        let index = {
            let mut s = self.shared.0.lock().unwrap();
            s.synced.push(None);
            s.synced.len() - 1
        };
        let leave = Arc::new(AtomicBool::new(false));
        let (port, group, shared, stop, leave2) = (
            self.port,
            self.group.clone(),
            self.shared.clone(),
            self.stop.clone(),
            leave.clone(),
        );
        let handle = std::thread::spawn(move || {
            if let Err(e) = member(port, &group, index, &shared, &stop, &leave2) {
                let mut s = shared.0.lock().unwrap();
                s.error.get_or_insert(format!("member {index}: {e}"));
                shared.1.notify_all();
            }
        });
        self.threads.push((leave, handle));
    }

    /// Tells member `index` to leave; returns once its LeaveGroup is answered.
    fn leave(&mut self, index: usize) {
        let (flag, handle) = self.threads.remove(index);
        flag.store(true, Ordering::SeqCst);
        let _ = handle.join();
    }

    /// Waits until every member still in the group has synced one generation above `above`
    /// with every partition assigned exactly once; that generation and the last sync instant.
    fn wait_synced(&self, above: i32) -> Result<(i32, Instant), String> {
        let deadline = Instant::now() + PHASE_WITHIN;
        let (lock, cvar) = &*self.shared;
        let mut s = lock.lock().unwrap();
        loop {
            if let Some(e) = &s.error {
                return Err(e.clone());
            }
            let live: Vec<_> = s.synced.iter().flatten().collect();
            let active = self.threads.len();
            if live.len() == active && active > 0 {
                let g = live[0].0;
                if g > above && live.iter().all(|l| l.0 == g) {
                    let mut parts: Vec<i32> = live.iter().flat_map(|l| l.2.clone()).collect();
                    parts.sort_unstable();
                    if parts != (0..PARTITIONS).collect::<Vec<_>>() {
                        return Err(format!("generation {g}: assignment {parts:?}"));
                    }
                    return Ok((g, live.iter().map(|l| l.1).max().unwrap()));
                }
            }
            let now = Instant::now();
            if now > deadline {
                return Err(format!("no common generation within {PHASE_WITHIN:?}"));
            }
            s = cvar.wait_timeout(s, deadline - now).unwrap().0;
        }
    }

    fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for (_, h) in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}

/// One member: join, sync, heartbeat (rejoining on REBALANCE_IN_PROGRESS) until told to stop
/// (then LeaveGroup) or to leave.
fn member(
    port: u16,
    group: &str,
    index: usize,
    shared: &(Mutex<Shared>, Condvar),
    stop: &AtomicBool,
    leave: &AtomicBool,
) -> Result<(), String> {
    let mut conn = Conn::connect(port)?;
    let mut member_id = StrBytes::default();
    let mut generation;
    'join: loop {
        let mut join = JoinGroupRequest::default();
        join.group_id = GroupId(sb(group));
        join.session_timeout_ms = SESSION_TIMEOUT_MS;
        join.rebalance_timeout_ms = REBALANCE_TIMEOUT_MS;
        join.member_id = member_id.clone();
        join.protocol_type = sb("consumer");
        let mut protocol = join_group_request::JoinGroupRequestProtocol::default();
        protocol.name = sb("range");
        protocol.metadata = subscription();
        join.protocols = vec![protocol];
        let joined: JoinGroupResponse = conn.call(ApiKey::JoinGroup, 9, &join)?;
        match joined.error_code {
            0 => {}
            MEMBER_ID_REQUIRED => {
                member_id = joined.member_id;
                continue 'join;
            }
            REBALANCE_IN_PROGRESS => continue 'join,
            COORDINATOR_NOT_AVAILABLE | COORDINATOR_LOAD_IN_PROGRESS | NOT_COORDINATOR => {
                std::thread::sleep(Duration::from_millis(50));
                continue 'join;
            }
            e => return Err(format!("JoinGroup: error {e}")),
        }
        member_id = joined.member_id.clone();
        generation = joined.generation_id;
        let mut sync = SyncGroupRequest::default();
        sync.group_id = GroupId(sb(group));
        sync.generation_id = generation;
        sync.member_id = member_id.clone();
        sync.protocol_type = Some(sb("consumer"));
        sync.protocol_name = Some(sb("range"));
        if joined.leader == member_id {
            let mut ids: Vec<StrBytes> =
                joined.members.iter().map(|m| m.member_id.clone()).collect();
            sync.assignments = range_assign(&mut ids)
                .into_iter()
                .map(|(m, a)| {
                    let mut x = sync_group_request::SyncGroupRequestAssignment::default();
                    x.member_id = m;
                    x.assignment = a;
                    x
                })
                .collect();
        }
        let synced: SyncGroupResponse = conn.call(ApiKey::SyncGroup, 5, &sync)?;
        match synced.error_code {
            0 => {}
            REBALANCE_IN_PROGRESS | ILLEGAL_GENERATION => continue 'join,
            e => return Err(format!("SyncGroup: error {e}")),
        }
        let parts = parse_assignment(synced.assignment).ok_or("assignment does not parse")?;
        {
            let mut s = shared.0.lock().unwrap();
            s.synced[index] = Some((generation, Instant::now(), parts));
            shared.1.notify_all();
        }
        loop {
            std::thread::sleep(HEARTBEAT_INTERVAL);
            if stop.load(Ordering::SeqCst) || leave.load(Ordering::SeqCst) {
                {
                    let mut s = shared.0.lock().unwrap();
                    s.synced[index] = None;
                    s.leave_sent = Some(Instant::now());
                    shared.1.notify_all();
                }
                let mut identity = leave_group_request::MemberIdentity::default();
                identity.member_id = member_id.clone();
                let mut req = LeaveGroupRequest::default();
                req.group_id = GroupId(sb(group));
                req.members = vec![identity];
                let left: LeaveGroupResponse = conn.call(ApiKey::LeaveGroup, 5, &req)?;
                if left.error_code != 0 && !stop.load(Ordering::SeqCst) {
                    return Err(format!("LeaveGroup: error {}", left.error_code));
                }
                return Ok(());
            }
            let mut hb = HeartbeatRequest::default();
            hb.group_id = GroupId(sb(group));
            hb.generation_id = generation;
            hb.member_id = member_id.clone();
            let beat: HeartbeatResponse = conn.call(ApiKey::Heartbeat, 4, &hb)?;
            match beat.error_code {
                0 => {}
                REBALANCE_IN_PROGRESS | ILLEGAL_GENERATION => continue 'join,
                UNKNOWN_MEMBER_ID => return Err("heartbeat: UNKNOWN_MEMBER_ID".into()),
                e => return Err(format!("Heartbeat: error {e}")),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Measurement

#[derive(Serialize, Default, Clone)]
struct Samples {
    initial_ms: Vec<f64>,
    join_ms: Vec<f64>,
    leave_ms: Vec<f64>,
}

#[derive(Serialize)]
struct Case {
    members: usize,
    samples: Samples,
}

#[derive(Serialize)]
struct BrokerRun {
    broker: String,
    not_run: Option<String>,
    cases: Vec<Case>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One repetition of the three phases for `n` members on group `group`.
fn repetition(port: u16, group: &str, n: usize, samples: &mut Samples) -> Result<(), String> {
    let coordinator = prepare(port, group)?;
    let mut g = Group::new(coordinator, group.to_string());
    let start = Instant::now();
    for _ in 0..n {
        g.add();
    }
    let (generation, at) = g.wait_synced(0)?;
    samples.initial_ms.push(ms(at - start));

    let start = Instant::now();
    g.add();
    let (generation, at) = g.wait_synced(generation)?;
    samples.join_ms.push(ms(at - start));

    g.leave(0);
    let start = g
        .shared
        .0
        .lock()
        .unwrap()
        .leave_sent
        .ok_or("no LeaveGroup sent")?;
    let (_, at) = g.wait_synced(generation)?;
    samples.leave_ms.push(ms(at.max(start) - start));
    g.stop();
    Ok(())
}

fn run_broker(kind: Kind, work: &std::path::Path, sizes: &[usize]) -> BrokerRun {
    let name = kind.name().to_string();
    let dir = work.join(&name);
    progress(&format!("{name}: starting"));
    let broker = match kind {
        Kind::Lockstep => Broker::start_lockstep(&dir, LockstepOptions::default()),
        Kind::Kafka => Broker::start_kafka(&dir, "group.initial.rebalance.delay.ms=0"),
    };
    let broker = match broker {
        Ok(b) => b,
        Err(e) => panic!("{name}: {e}"),
    };
    let mut cases = Vec::new();
    for &n in sizes {
        let mut samples = Samples::default();
        for r in 0..REPEATS {
            let group = format!("rebalance-bench-{n}-{r}");
            if let Err(e) = repetition(broker.port, &group, n, &mut samples) {
                panic!("{name}: N={n} repetition {r}: {e}");
            }
            progress(&format!(
                "{name}: N={n} repetition {}/{REPEATS}: initial {:.0} ms, join {:.0} ms, leave {:.0} ms",
                r + 1,
                samples.initial_ms[r],
                samples.join_ms[r],
                samples.leave_ms[r]
            ));
        }
        cases.push(Case {
            members: n,
            samples,
        });
    }
    if let Err(e) = broker.stop_clean() {
        panic!("{name}: {e}");
    }
    BrokerRun {
        broker: name,
        not_run: None,
        cases,
    }
}

fn median_max(v: &[f64]) -> (f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (s[s.len() / 2], *s.last().unwrap())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench");
    let sizes: &[usize] = if full { &[1, 10, 100] } else { &[1, 3] };
    let kafka_unavailable = if !full {
        Some("smoke run under `cargo test` (Kafka runs only under `cargo bench`)".to_string())
    } else if args.iter().any(|a| a == "--no-kafka") {
        Some("--no-kafka".to_string())
    } else {
        kafka_available().err()
    };
    let work = tempfile::Builder::new()
        .prefix("lockstep-bench-rebalance-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("temporary directory");
    let mut runs = vec![run_broker(Kind::Lockstep, work.path(), sizes)];
    match kafka_unavailable {
        Some(why) => {
            progress(&format!("kafka not run: {why}"));
            runs.push(BrokerRun {
                broker: "kafka".into(),
                not_run: Some(why),
                cases: Vec::new(),
            });
        }
        None => runs.push(run_broker(Kind::Kafka, work.path(), sizes)),
    }

    println!(
        "\nrebalance time, ms (median / max of {REPEATS}; {PARTITIONS} partitions, heartbeat {} ms)",
        HEARTBEAT_INTERVAL.as_millis()
    );
    println!(
        "{:<10} {:>7} {:>17} {:>17} {:>17}",
        "broker", "members", "initial", "+1 join", "-1 leave"
    );
    for run in &runs {
        if let Some(why) = &run.not_run {
            println!("{:<10} not run: {why}", run.broker);
        }
        for c in &run.cases {
            let cell = |v: &[f64]| {
                let (m, x) = median_max(v);
                format!("{m:>8.1} / {x:>6.1}")
            };
            println!(
                "{:<10} {:>7} {:>17} {:>17} {:>17}",
                run.broker,
                c.members,
                cell(&c.samples.initial_ms),
                cell(&c.samples.join_ms),
                cell(&c.samples.leave_ms)
            );
        }
    }
    let report = serde_json::json!({
        "commit": common::git_commit(),
        "machine": common::machine(),
        "mode": if full { "full" } else { "smoke" },
        "partitions": PARTITIONS,
        "repeats": REPEATS,
        "heartbeat_interval_ms": HEARTBEAT_INTERVAL.as_millis() as u64,
        "session_timeout_ms": SESSION_TIMEOUT_MS,
        "kafka_props": "group.initial.rebalance.delay.ms=0",
        "runs": runs,
    });
    let path = common::write_report("rebalance", &report);
    println!("report: {}", path.display());
}
