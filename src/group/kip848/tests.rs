//! Tests of the KIP-848 membership: scripted cases, the transition table, and a model test of
//! random joins, heartbeats, leaves, subscription changes, new partitions and expiries against
//! simulated clients (each owns what the broker last gave it). Checked at every step: no
//! partition is owned by two clients (Kafka's reconciliation guarantee); after the clients
//! settle: every member is Stable at the group epoch, owns its target, and the target gives
//! every subscribed partition to exactly one subscriber (the trivial model: the set of
//! subscribed partitions), balanced within one for identical subscriptions.

use super::*;
use rand::{rngs::SmallRng, Rng, SeedableRng};

fn topics(list: &[(&str, u128, i32)]) -> BTreeMap<String, TopicMeta> {
    list.iter()
        .map(|(n, id, p)| {
            (
                n.to_string(),
                TopicMeta {
                    id: Uuid::from_u128(*id),
                    partitions: *p,
                },
            )
        })
        .collect()
}

fn join(id: &str, subs: &[&str]) -> HeartbeatIn {
    HeartbeatIn {
        member_id: id.to_string(),
        member_epoch: 0,
        rebalance_timeout_ms: 300_000,
        subscribed_topic_names: Some(subs.iter().map(|s| s.to_string()).collect()),
        owned: Some(BTreeSet::new()),
        ..Default::default()
    }
}

fn beat(id: &str, epoch: i32, owned: &BTreeSet<Tp>) -> HeartbeatIn {
    HeartbeatIn {
        member_id: id.to_string(),
        member_epoch: epoch,
        rebalance_timeout_ms: -1,
        owned: Some(owned.clone()),
        ..Default::default()
    }
}

#[test]
fn two_members_share_then_one_leaves() {
    let t = topics(&[("orders", 1, 4)]);
    let mut g = Consumer848Group::default();
    let a = g.heartbeat(&join("a", &["orders"]), &t, 0).unwrap();
    assert_eq!(a.member_epoch, 1);
    let a_owned = a.assignment.unwrap();
    assert_eq!(a_owned.len(), 4);
    assert_eq!(group_state_name(&g), "Stable");

    // b joins: the group epoch moves to 2; b gets nothing yet (a still holds all four).
    let b = g.heartbeat(&join("b", &["orders"]), &t, 10).unwrap();
    assert_eq!(g.group_epoch, 2);
    assert_eq!(b.member_epoch, 2);
    assert!(b.assignment.unwrap().is_empty());
    assert_eq!(g.members["b"].state, MemberState::UnreleasedPartitions);
    assert_eq!(group_state_name(&g), "Reconciling");

    // a is asked to revoke two, at its old epoch.
    let r = g.heartbeat(&beat("a", 1, &a_owned), &t, 20).unwrap();
    assert_eq!(r.member_epoch, 1);
    let a_kept = r.assignment.unwrap();
    assert_eq!(a_kept.len(), 2);
    assert_eq!(g.members["a"].state, MemberState::UnrevokedPartitions);
    // Until a reports them revoked, b does not get them.
    let r = g
        .heartbeat(&beat("b", 2, &BTreeSet::new()), &t, 30)
        .unwrap();
    assert_eq!(r.assignment, None);
    // a revokes: epoch 2, stable.
    let r = g.heartbeat(&beat("a", 1, &a_kept), &t, 40).unwrap();
    assert_eq!(r.member_epoch, 2);
    assert_eq!(g.members["a"].state, MemberState::Stable);
    // Now b gets the other two.
    let r = g
        .heartbeat(&beat("b", 2, &BTreeSet::new()), &t, 50)
        .unwrap();
    let b_owned = r.assignment.unwrap();
    assert_eq!(b_owned.len(), 2);
    assert!(b_owned.is_disjoint(&a_kept));
    assert_eq!(group_state_name(&g), "Stable");

    // Commits need the current epoch.
    assert_eq!(g.validate_offset_commit("a", 2), Ok(()));
    assert_eq!(
        g.validate_offset_commit("a", 1),
        Err(GroupError::StaleMemberEpoch)
    );
    assert_eq!(
        g.validate_offset_commit("zz", 2),
        Err(GroupError::UnknownMember)
    );

    // a leaves: b gets all four at epoch 3.
    let r = g.heartbeat(&beat("a", -1, &a_kept), &t, 60).unwrap();
    assert_eq!(r.member_epoch, -1);
    let r = g.heartbeat(&beat("b", 2, &b_owned), &t, 70).unwrap();
    assert_eq!(r.member_epoch, 3);
    assert_eq!(r.assignment.unwrap().len(), 4);
}

#[test]
fn epochs_are_checked() {
    let t = topics(&[("orders", 1, 2)]);
    let mut g = Consumer848Group::default();
    let a = g.heartbeat(&join("a", &["orders"]), &t, 0).unwrap();
    let owned = a.assignment.unwrap();
    let err = g.heartbeat(&beat("a", 7, &owned), &t, 1).unwrap_err();
    assert!(
        matches!(err, HeartbeatError::FencedEpoch { sent: 7, .. }),
        "{err:?}"
    );
    let err = g.heartbeat(&beat("nobody", 1, &owned), &t, 1).unwrap_err();
    assert_eq!(err, HeartbeatError::UnknownMember("nobody".into()));
    let mut bad = join("c", &["orders"]);
    bad.server_assignor = Some("sticky".into());
    assert_eq!(
        g.heartbeat(&bad, &t, 1).unwrap_err(),
        HeartbeatError::UnsupportedAssignor("sticky".into())
    );
    let mut no_subs = join("c", &[]);
    no_subs.subscribed_topic_names = None;
    assert!(matches!(
        g.heartbeat(&no_subs, &t, 1).unwrap_err(),
        HeartbeatError::InvalidRequest(_)
    ));
    // A lost response: the previous epoch is accepted when it owns a subset of its assignment.
    g.heartbeat(&join("b", &["orders"]), &t, 2).unwrap();
    g.heartbeat(&beat("a", 1, &owned), &t, 3).unwrap(); // asked to revoke one
    let kept = g.members["a"].assigned.clone();
    g.heartbeat(&beat("a", 1, &kept), &t, 4).unwrap(); // revoked: epoch 2
    assert_eq!(g.members["a"].member_epoch, 2);
    assert!(g.heartbeat(&beat("a", 1, &kept), &t, 5).is_ok());
    assert!(matches!(
        g.heartbeat(&beat("a", 1, &owned), &t, 5).unwrap_err(),
        HeartbeatError::FencedEpoch {
            sent: 1,
            current: 2,
            ..
        }
    ));
}

#[test]
fn sessions_and_revocations_expire() {
    let t = topics(&[("orders", 1, 2)]);
    let mut g = Consumer848Group::default();
    let a = g.heartbeat(&join("a", &["orders"]), &t, 0).unwrap();
    let mut b_join = join("b", &["orders"]);
    b_join.rebalance_timeout_ms = 1_000;
    g.heartbeat(&b_join, &t, 0).unwrap();
    // a is asked to revoke and never does: removed after its rebalance timeout (300 s);
    // b, silent, is removed after the session timeout first.
    g.heartbeat(&beat("a", 1, &a.assignment.unwrap()), &t, 10)
        .unwrap();
    assert_eq!(
        g.expire(CONSUMER_GROUP_SESSION_TIMEOUT_MS),
        vec!["b".to_string()]
    );
    assert_eq!(g.expire(10 + 300_000), vec!["a".to_string()]);
    assert!(g.is_empty());
    assert_eq!(group_state_name(&g), "Empty");
}

#[test]
fn new_partitions_move_the_group_epoch() {
    let mut t = topics(&[("orders", 1, 2)]);
    let mut g = Consumer848Group::default();
    let a = g.heartbeat(&join("a", &["orders"]), &t, 0).unwrap();
    t.get_mut("orders").unwrap().partitions = 3;
    g.topics_changed(&t);
    let r = g
        .heartbeat(&beat("a", a.member_epoch, &a.assignment.unwrap()), &t, 1)
        .unwrap();
    assert_eq!(r.member_epoch, a.member_epoch + 1);
    assert_eq!(r.assignment.unwrap().len(), 3);
}

#[test]
fn transition_table() {
    use MemberState::*;
    let states = [Stable, UnrevokedPartitions, UnreleasedPartitions];
    for from in states {
        for to in states {
            for (old, new, target) in [(1, 1, 3), (1, 2, 3), (1, 3, 3), (2, 1, 3), (1, 4, 3)] {
                let ok = check_transition(from, to, old, new, target).is_ok();
                let want = new >= old
                    && new <= target
                    && match to {
                        UnrevokedPartitions => {
                            new == old || (from == UnrevokedPartitions && new == old + 1)
                        }
                        _ => new == target || new == old,
                    };
                assert_eq!(ok, want, "{from:?}->{to:?} {old}->{new} target {target}");
            }
        }
    }
}

/// A simulated client: what it owns, its epoch.
#[derive(Clone, Debug)]
struct Client {
    epoch: i32,
    owned: BTreeSet<Tp>,
    subs: Vec<String>,
}

fn apply(client: &mut Client, out: &HeartbeatOut) {
    client.epoch = out.member_epoch;
    if let Some(a) = &out.assignment {
        client.owned = a.clone();
    }
}

fn assert_disjoint(clients: &BTreeMap<String, Client>) {
    let mut seen: BTreeMap<Tp, &str> = BTreeMap::new();
    for (id, c) in clients {
        for tp in &c.owned {
            if let Some(other) = seen.insert(*tp, id) {
                panic!("{tp:?} owned by {other} and {id}");
            }
        }
    }
}

fn run_model(seed: u64, steps: usize) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let names = ["t0", "t1", "t2"];
    let mut t = topics(&[("t0", 10, 3), ("t1", 11, 5), ("t2", 12, 1)]);
    let mut g = Consumer848Group::default();
    let mut clients: BTreeMap<String, Client> = BTreeMap::new();
    let mut now = 0u64;
    let mut next_id = 0;
    let homogeneous = rng.gen_bool(0.5);
    let pick_subs = |rng: &mut SmallRng| -> Vec<String> {
        if homogeneous {
            vec!["t0".to_string(), "t1".to_string()]
        } else {
            names
                .iter()
                .filter(|_| rng.gen_bool(0.5))
                .map(|s| s.to_string())
                .collect()
        }
    };
    for _ in 0..steps {
        now += rng.gen_range(0..2_000);
        match rng.gen_range(0..100) {
            0..=9 if clients.len() < 6 => {
                let id = format!("m{next_id}");
                next_id += 1;
                let subs = pick_subs(&mut rng);
                let refs: Vec<&str> = subs.iter().map(String::as_str).collect();
                let out = g.heartbeat(&join(&id, &refs), &t, now).unwrap();
                let mut c = Client {
                    epoch: 0,
                    owned: BTreeSet::new(),
                    subs,
                };
                apply(&mut c, &out);
                clients.insert(id, c);
            }
            10..=14 if !clients.is_empty() => {
                let id = clients
                    .keys()
                    .nth(rng.gen_range(0..clients.len()))
                    .unwrap()
                    .clone();
                let c = clients.remove(&id).unwrap();
                g.heartbeat(&beat(&id, -1, &c.owned), &t, now).unwrap();
            }
            15..=17 if !clients.is_empty() && !homogeneous => {
                let id = clients
                    .keys()
                    .nth(rng.gen_range(0..clients.len()))
                    .unwrap()
                    .clone();
                let subs = pick_subs(&mut rng);
                let c = clients.get_mut(&id).unwrap();
                let mut req = beat(&id, c.epoch, &c.owned);
                req.subscribed_topic_names = Some(subs.clone());
                c.subs = subs;
                match g.heartbeat(&req, &t, now) {
                    Ok(out) => apply(c, &out),
                    Err(e) => panic!("{e}"),
                }
            }
            18 => {
                let name = names[rng.gen_range(0..names.len())];
                t.get_mut(name).unwrap().partitions += 1;
                g.topics_changed(&t);
            }
            19 => {
                // Time passes beyond a session: every silent member is removed.
                now += CONSUMER_GROUP_SESSION_TIMEOUT_MS;
                let gone = g.expire(now);
                for id in gone {
                    clients.remove(&id);
                }
            }
            _ if !clients.is_empty() => {
                let id = clients
                    .keys()
                    .nth(rng.gen_range(0..clients.len()))
                    .unwrap()
                    .clone();
                let c = clients.get_mut(&id).unwrap();
                // Sometimes the client revokes lazily: it keeps reporting what it owned.
                let out = g.heartbeat(&beat(&id, c.epoch, &c.owned), &t, now).unwrap();
                apply(c, &out);
            }
            _ => {}
        }
        assert_disjoint(&clients);
        // Keep everyone alive (the expiry step removes them all at once).
        let gone = g.expire(now);
        for id in gone {
            clients.remove(&id);
        }
    }
    // Settle: everyone heartbeats until nothing changes.
    for _ in 0..10 {
        let ids: Vec<String> = clients.keys().cloned().collect();
        for id in ids {
            let c = clients.get_mut(&id).unwrap();
            let out = g.heartbeat(&beat(&id, c.epoch, &c.owned), &t, now).unwrap();
            apply(c, &out);
            assert_disjoint(&clients);
        }
    }
    // The model: every subscribed partition once, to a subscriber; members stable at the epoch.
    let mut want: BTreeSet<Tp> = BTreeSet::new();
    for c in clients.values() {
        for s in &c.subs {
            let m = t[s];
            want.extend((0..m.partitions).map(|p| (m.id, p)));
        }
    }
    let mut got = BTreeSet::new();
    for (id, c) in &clients {
        let m = &g.members[id];
        assert_eq!(m.state, MemberState::Stable, "seed {seed}: {id}");
        assert_eq!(m.member_epoch, g.group_epoch, "seed {seed}: {id}");
        assert_eq!(c.owned, m.assigned, "seed {seed}: {id}");
        for tp in &c.owned {
            let topic = t.iter().find(|(_, meta)| meta.id == tp.0).unwrap().0;
            assert!(c.subs.contains(topic), "seed {seed}: {id} owns {tp:?}");
            got.insert(*tp);
        }
    }
    assert_eq!(got, want, "seed {seed}");
    if homogeneous && !clients.is_empty() {
        let counts: Vec<usize> = clients.values().map(|c| c.owned.len()).collect();
        assert!(
            counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1,
            "seed {seed}: {counts:?}"
        );
    }
    assert_eq!(
        group_state_name(&g),
        if clients.is_empty() {
            "Empty"
        } else {
            "Stable"
        }
    );
}

#[test]
fn model_random_membership() {
    let base: u64 = std::env::var("LOCKSTEP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(848);
    for i in 0..200 {
        run_model(base + i, 300);
    }
}
