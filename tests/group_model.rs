//! The classic group state machine (`lockstep::group::classic`) against a trivial model.
//!
//! What it proves: under random sequences of joins, syncs, heartbeats, leaves, crashes of
//! members (they stop talking), static-member restarts and the passage of time, (1) the group's
//! own invariants hold after every step (`ClassicGroup::check`, run by every call, and the
//! transition table, asserted on every change), (2) the generation never goes back, (3) a member
//! that left is gone at once and one that crashed is gone after its session timeout, and (4) once
//! the surviving clients behave (rejoin when told, heartbeat), the group settles: Stable, its
//! members exactly the live clients, each holding the assignment the leader gave it for the
//! current generation. The model is a set of live clients and their member ids. Each seed is
//! printed; `GROUP_MODEL_SEED=n` replays one.
//!
//! Also: every pair of the transition table, and the exact answers of a few Kafka rules
//! (MEMBER_ID_REQUIRED, static rejoin without a rebalance, FENCED_INSTANCE_ID, ILLEGAL_GENERATION).

use bytes::Bytes;
use kafka_protocol::ResponseError;
use lockstep::group::classic::{
    ClassicGroup, ClassicState, JoinAnswer, JoinRequest, JoinStep, SyncRequest, SyncStep,
};
use lockstep::group::GroupError;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;

const SESSION_MS: i32 = 10_000;
const REBALANCE_MS: i32 = 15_000;

#[derive(Clone, Debug, PartialEq)]
enum Phase {
    /// Will send a JoinGroup.
    Idle,
    Joining(u64),
    /// Joined `generation`; will send a SyncGroup (with assignments if leader).
    ToSync(JoinAnswer),
    Syncing(u64, i32),
    Stable(i32, Bytes),
    /// Crashed or left: says nothing more.
    Gone,
}

#[derive(Clone, Debug)]
struct Client {
    name: String,
    instance: Option<String>,
    member_id: String,
    phase: Phase,
    last_heartbeat: u64,
}

fn join_request(c: &Client) -> JoinRequest {
    JoinRequest {
        member_id: c.member_id.clone(),
        group_instance_id: c.instance.clone(),
        client_id: c.name.clone(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: SESSION_MS,
        rebalance_timeout_ms: REBALANCE_MS,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::from_static(b"sub"))],
        api_version: 9,
    }
}

fn assignment_for(member: &str, generation: i32) -> Bytes {
    Bytes::from(format!("{member}@{generation}"))
}

/// One client step (what a well-behaved client does next).
fn act(g: &mut ClassicGroup, c: &mut Client, now: u64) {
    match c.phase.clone() {
        Phase::Gone => {}
        Phase::Idle => match g.join(&join_request(c), now) {
            JoinStep::Done(a) => on_join(c, a),
            JoinStep::Wait(t) => c.phase = Phase::Joining(t),
        },
        Phase::Joining(t) => {
            if let Some(a) = g.poll_join(t, now) {
                on_join(c, a)
            }
        }
        Phase::ToSync(a) => {
            let assignments = a
                .members
                .iter()
                .map(|m| {
                    (
                        m.member_id.clone(),
                        assignment_for(&m.member_id, a.generation_id),
                    )
                })
                .collect();
            let req = SyncRequest {
                member_id: c.member_id.clone(),
                group_instance_id: c.instance.clone(),
                generation_id: a.generation_id,
                protocol_type: Some("consumer".into()),
                protocol_name: a.protocol_name.clone(),
                assignments,
            };
            match g.sync(&req, now) {
                SyncStep::Done(s) => on_sync(
                    c,
                    s.error.map_or(0, |e| e.code()),
                    a.generation_id,
                    s.assignment,
                ),
                SyncStep::Wait(t) => c.phase = Phase::Syncing(t, a.generation_id),
            }
        }
        Phase::Syncing(t, generation) => {
            if let Some(s) = g.poll_sync(t, now) {
                on_sync(c, s.error.map_or(0, |e| e.code()), generation, s.assignment)
            }
        }
        Phase::Stable(generation, _) => {
            if now >= c.last_heartbeat + 1_000 {
                c.last_heartbeat = now;
                match g.heartbeat(&c.member_id, c.instance.as_deref(), generation, now) {
                    Ok(()) => {}
                    Err(e) => on_error(c, e.code()),
                }
            }
        }
    }
}

fn on_join(c: &mut Client, a: JoinAnswer) {
    if a.error.map_or(0, |e| e.code()) == ResponseError::MemberIdRequired.code() {
        c.member_id = a.member_id;
        c.phase = Phase::Idle;
    } else if a.error.map_or(0, |e| e.code()) == 0 {
        c.member_id = a.member_id.clone();
        c.phase = Phase::ToSync(a);
    } else {
        on_error(c, a.error.map_or(0, |e| e.code()));
    }
}

fn on_sync(c: &mut Client, code: i16, generation: i32, assignment: Bytes) {
    if code == 0 {
        c.phase = Phase::Stable(generation, assignment);
    } else {
        on_error(c, code);
    }
}

fn on_error(c: &mut Client, code: i16) {
    if code == ResponseError::FencedInstanceId.code() {
        c.phase = Phase::Gone;
        return;
    }
    if code == ResponseError::UnknownMemberId.code() {
        c.member_id.clear();
    } else {
        assert!(
            code == ResponseError::RebalanceInProgress.code()
                || code == ResponseError::IllegalGeneration.code(),
            "unexpected error {code} for {c:?}"
        );
    }
    c.phase = Phase::Idle;
}

/// Runs one seed; returns how many live members the group settled with.
fn run(seed: u64) -> usize {
    let mut rng = SmallRng::seed_from_u64(seed);
    let delay = if rng.gen_bool(0.3) { 3_000 } else { 0 };
    let mut g = ClassicGroup::new(0, delay, seed);
    let mut clients: Vec<Client> = Vec::new();
    let mut now: u64 = 1;
    let mut last_generation = g.generation_id();
    let mut crashed: Vec<(String, u64)> = Vec::new();
    let steps = rng.gen_range(50..400);
    for _ in 0..steps {
        match rng.gen_range(0..100) {
            0..=9 if clients.len() < 8 => {
                let n = clients.len();
                let instance = rng.gen_bool(0.3).then(|| format!("instance-{n}"));
                clients.push(Client {
                    name: format!("client-{n}"),
                    instance,
                    member_id: String::new(),
                    phase: Phase::Idle,
                    last_heartbeat: now,
                });
            }
            10..=12 if !clients.is_empty() => {
                // Leave.
                let i = rng.gen_range(0..clients.len());
                let c = &mut clients[i];
                if c.phase != Phase::Gone && !c.member_id.is_empty() {
                    let r = g.leave(&c.member_id, c.instance.as_deref(), now);
                    if r.is_ok() {
                        assert!(
                            g.member(&c.member_id).is_none(),
                            "a member that left is gone"
                        );
                    }
                    c.phase = Phase::Gone;
                }
            }
            13..=15 if !clients.is_empty() => {
                // Crash: stops talking.
                let i = rng.gen_range(0..clients.len());
                let c = &mut clients[i];
                if c.phase != Phase::Gone {
                    if !c.member_id.is_empty() {
                        crashed.push((c.member_id.clone(), now));
                    }
                    c.phase = Phase::Gone;
                }
            }
            16..=17 if !clients.is_empty() => {
                // A static member restarts: a new incarnation with the same instance id.
                let i = rng.gen_range(0..clients.len());
                if let Some(instance) = clients[i].instance.clone() {
                    let old = clients[i].clone();
                    clients[i].phase = Phase::Gone;
                    clients.push(Client {
                        name: format!("{}-restarted", old.name),
                        instance: Some(instance),
                        member_id: String::new(),
                        phase: Phase::Idle,
                        last_heartbeat: now,
                    });
                }
            }
            18..=40 => now += rng.gen_range(0..2_000),
            _ if !clients.is_empty() => {
                let i = rng.gen_range(0..clients.len());
                act(&mut g, &mut clients[i], now);
            }
            _ => {}
        }
        g.tick(now);
        assert!(g.generation_id() >= last_generation, "generation went back");
        last_generation = g.generation_id();
        for (id, at) in &crashed {
            // Gone after its session timeout, unless the rebalance in progress holds it (a
            // member awaiting a join or sync is kept until the rebalance deadline).
            if now > at + (SESSION_MS + 2 * REBALANCE_MS) as u64 + 2 * delay {
                assert!(
                    g.member(id).is_none(),
                    "seed {seed}: crashed member {id} still there"
                );
            }
        }
    }
    // Settle: live clients behave for long enough.
    for _ in 0..2_000 {
        now += 50;
        for c in clients.iter_mut() {
            act(&mut g, c, now);
        }
        g.tick(now);
        assert!(g.generation_id() >= last_generation);
        last_generation = g.generation_id();
    }
    let live: BTreeSet<String> = clients
        .iter()
        .filter(|c| c.phase != Phase::Gone)
        .map(|c| c.member_id.clone())
        .collect();
    let members: BTreeSet<String> = g.members().map(|m| m.member_id.clone()).collect();
    assert_eq!(members, live, "seed {seed}: members are the live clients");
    if live.is_empty() {
        assert_eq!(g.state(), ClassicState::Empty, "seed {seed}");
        return 0;
    }
    assert_eq!(g.state(), ClassicState::Stable, "seed {seed}");
    for c in clients.iter().filter(|c| c.phase != Phase::Gone) {
        match &c.phase {
            Phase::Stable(generation, assignment) => {
                assert_eq!(*generation, g.generation_id(), "seed {seed}: {c:?}");
                // A static member that took over keeps the assignment made for its old id.
                let m = g.member(&c.member_id).expect("member");
                assert_eq!(assignment, &m.assignment, "seed {seed}: {c:?}");
                if c.instance.is_none() {
                    assert_eq!(*assignment, assignment_for(&c.member_id, *generation));
                }
            }
            other => panic!("seed {seed}: live client not stable: {other:?}"),
        }
    }
    live.len()
}

#[test]
fn random_runs_settle_to_the_live_clients() {
    if let Ok(seed) = std::env::var("GROUP_MODEL_SEED") {
        println!("{} live members", run(seed.parse().expect("a number")));
        return;
    }
    let base: u64 = rand::random::<u32>().into();
    println!("group model: seeds {base}..{}", base + 300);
    let mut busy = 0;
    for seed in (base..base + 300).chain(0..100) {
        if run(seed) >= 2 {
            busy += 1;
        }
    }
    assert!(busy >= 100, "only {busy} runs settled with several members");
}

#[test]
fn transition_table_is_kafkas() {
    use ClassicState::*;
    let allowed = [
        (PreparingRebalance, Empty),
        (Empty, PreparingRebalance),
        (Stable, PreparingRebalance),
        (CompletingRebalance, PreparingRebalance),
        (PreparingRebalance, CompletingRebalance),
        (CompletingRebalance, Stable),
    ];
    for from in ClassicState::ALL {
        for to in ClassicState::ALL {
            let expected = to == Dead || allowed.contains(&(from, to));
            assert_eq!(to.can_follow(from), expected, "{from:?} -> {to:?}");
        }
    }
}

fn joined(g: &mut ClassicGroup, req: &JoinRequest, now: u64) -> JoinAnswer {
    match g.join(req, now) {
        JoinStep::Done(a) => a,
        JoinStep::Wait(t) => g.poll_join(t, now).expect("completes at once"),
    }
}

fn client(name: &str, instance: Option<&str>) -> Client {
    Client {
        name: name.into(),
        instance: instance.map(String::from),
        member_id: String::new(),
        phase: Phase::Idle,
        last_heartbeat: 0,
    }
}

#[test]
fn kafka_rules() {
    let mut g = ClassicGroup::new(0, 0, 1);
    // A new dynamic member first gets MEMBER_ID_REQUIRED with its id.
    let mut a = client("a", None);
    let first = joined(&mut g, &join_request(&a), 1);
    assert_eq!(
        first.error.map_or(0, |e| e.code()),
        ResponseError::MemberIdRequired.code()
    );
    assert!(first.member_id.starts_with("a-"));
    a.member_id = first.member_id.clone();
    let answer = joined(&mut g, &join_request(&a), 2);
    assert_eq!(answer.error.map_or(0, |e| e.code()), 0);
    assert_eq!(answer.generation_id, 1);
    assert_eq!(answer.leader, a.member_id);
    assert_eq!(answer.members.len(), 1);
    // A session timeout out of Kafka's bounds.
    let mut bad = join_request(&a);
    bad.session_timeout_ms = 1_000;
    assert_eq!(
        joined(&mut g, &bad, 3).error.map_or(0, |e| e.code()),
        ResponseError::InvalidSessionTimeout.code()
    );
    // An unknown protocol type.
    let mut other = join_request(&client("b", None));
    other.protocol_type = "connect".into();
    assert_eq!(
        joined(&mut g, &other, 3).error.map_or(0, |e| e.code()),
        ResponseError::InconsistentGroupProtocol.code()
    );
    // Sync with the wrong generation.
    let sync = |generation| SyncRequest {
        member_id: a.member_id.clone(),
        group_instance_id: None,
        generation_id: generation,
        protocol_type: None,
        protocol_name: None,
        assignments: vec![(a.member_id.clone(), Bytes::from_static(b"x"))],
    };
    assert!(
        matches!(g.sync(&sync(7), 4), SyncStep::Done(s) if s.error.map_or(0, |e| e.code()) == ResponseError::IllegalGeneration.code())
    );
    let step = g.sync(&sync(1), 4);
    let SyncStep::Wait(t) = step else {
        panic!("leader's sync parks until answered: {step:?}")
    };
    assert_eq!(
        g.poll_sync(t, 4).expect("answered").assignment,
        Bytes::from_static(b"x")
    );
    assert_eq!(g.state(), ClassicState::Stable);
    assert_eq!(
        g.heartbeat(&a.member_id, None, 0, 5),
        Err(GroupError::IllegalGeneration)
    );
    assert_eq!(
        g.heartbeat("nobody", None, 1, 5),
        Err(GroupError::UnknownMember)
    );
    assert_eq!(g.heartbeat(&a.member_id, None, 1, 5), Ok(()));

    // Static membership: a restart with the same instance id takes over without a rebalance.
    let mut g = ClassicGroup::new(0, 0, 2);
    let s1 = client("s", Some("i-1"));
    let first = joined(&mut g, &join_request(&s1), 1);
    assert_eq!(
        first.error.map_or(0, |e| e.code()),
        0,
        "static members need no member id round trip"
    );
    let old_id = first.member_id.clone();
    let SyncStep::Wait(t) = g.sync(
        &SyncRequest {
            member_id: old_id.clone(),
            group_instance_id: Some("i-1".into()),
            generation_id: 1,
            protocol_type: None,
            protocol_name: None,
            assignments: vec![(old_id.clone(), Bytes::from_static(b"p0"))],
        },
        2,
    ) else {
        panic!()
    };
    assert!(g.poll_sync(t, 2).is_some());
    let again = joined(&mut g, &join_request(&s1), 3);
    assert_eq!(again.error.map_or(0, |e| e.code()), 0);
    assert_ne!(again.member_id, old_id);
    assert_eq!(again.generation_id, 1, "no rebalance");
    assert!(
        again.skip_assignment,
        "the static leader is told to skip the assignment"
    );
    assert_eq!(g.state(), ClassicState::Stable);
    assert_eq!(
        g.member(&again.member_id).expect("new id").assignment,
        Bytes::from_static(b"p0")
    );
    // The old incarnation is fenced.
    assert_eq!(
        g.heartbeat(&old_id, Some("i-1"), 1, 4),
        Err(GroupError::FencedInstance)
    );
    assert_eq!(
        g.leave(&old_id, Some("i-1"), 4),
        Err(GroupError::FencedInstance)
    );
    // Leaving by instance id removes it; the group is empty again.
    assert_eq!(g.leave("", Some("i-1"), 5), Ok(()));
    assert_eq!(g.state(), ClassicState::Empty);
    assert_eq!(g.generation_id(), 2);
}

#[test]
fn initial_rebalance_delay_waits_for_more_members() {
    let mut g = ClassicGroup::new(0, 3_000, 3);
    let a = client("a", Some("ia"));
    let b = client("b", Some("ib"));
    let JoinStep::Wait(ta) = g.join(&join_request(&a), 0) else {
        panic!()
    };
    assert!(g.poll_join(ta, 1_000).is_none(), "waits for the delay");
    let JoinStep::Wait(tb) = g.join(&join_request(&b), 1_000) else {
        panic!()
    };
    // The delay ends at 3 000, but a member arrived: extended by another delay.
    assert!(g.poll_join(ta, 3_000).is_none());
    let answer = g
        .poll_join(ta, 6_000)
        .expect("completed after the extension");
    assert_eq!(answer.members.len(), 2);
    assert!(g.poll_join(tb, 6_000).is_some());
    assert_eq!(g.state(), ClassicState::CompletingRebalance);
}
