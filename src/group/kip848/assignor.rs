//! KIP-848 server-side assignors: `uniform` (Kafka's default) and `range`.
//!
//! Pure functions from the members' subscriptions, the previous target assignment and the
//! subscribed topics' metadata to a new target assignment. Every partition of a subscribed topic
//! is assigned to exactly one member subscribed to its topic (or to none when nobody subscribes).
//!
//! - [`uniform`]: sticky and balanced, as Kafka's `UniformAssignor` intends: a member keeps the
//!   partitions it had that it still subscribes to, free partitions go to the least loaded
//!   eligible member, then single partitions move from the most to the least loaded member that
//!   can take them until no move narrows the spread. With identical subscriptions the counts
//!   differ by at most one. (Kafka's algorithm also takes racks into account; Lockstep has one
//!   broker and no racks.)
//! - [`range`]: per topic, the subscribed members sorted by member id get contiguous ranges of
//!   partitions, the first `partitions % members` one more — the client-side `range` layout
//!   (Kafka's server-side range also keeps ranges sticky; this one is recomputed).

use super::{TopicMeta, Tp};
use std::collections::{BTreeMap, BTreeSet};

/// The assignors this broker serves, by the names clients send (`group.remote.assignor`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Assignor {
    Uniform,
    Range,
}

impl Assignor {
    /// The default when no member asks for one (Kafka's `group.consumer.assignors` first entry).
    pub const DEFAULT: Assignor = Assignor::Uniform;

    pub fn by_name(name: &str) -> Option<Assignor> {
        match name {
            "uniform" => Some(Assignor::Uniform),
            "range" => Some(Assignor::Range),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Assignor::Uniform => "uniform",
            Assignor::Range => "range",
        }
    }

    /// Runs this assignor.
    pub fn assign(
        self,
        members: &BTreeMap<String, MemberSpec>,
        topics: &BTreeMap<String, TopicMeta>,
    ) -> BTreeMap<String, BTreeSet<Tp>> {
        let out = match self {
            Assignor::Uniform => uniform(members, topics),
            Assignor::Range => range(members, topics),
        };
        check_assignment(members, topics, &out);
        out
    }
}

/// What an assignor knows about one member.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberSpec {
    pub subscribed: BTreeSet<String>,
    /// Its partitions in the previous target assignment.
    pub previous: BTreeSet<Tp>,
}

/// The partitions of the topics some member subscribes to, with the topic name of each.
fn subscribed_partitions(
    members: &BTreeMap<String, MemberSpec>,
    topics: &BTreeMap<String, TopicMeta>,
) -> BTreeMap<Tp, String> {
    let names: BTreeSet<&String> = members.values().flat_map(|m| &m.subscribed).collect();
    let mut out = BTreeMap::new();
    for name in names {
        if let Some(meta) = topics.get(name) {
            for p in 0..meta.partitions {
                out.insert((meta.id, p), name.clone());
            }
        }
    }
    out
}

/// Sticky, balanced assignment (see the module docs).
pub fn uniform(
    members: &BTreeMap<String, MemberSpec>,
    topics: &BTreeMap<String, TopicMeta>,
) -> BTreeMap<String, BTreeSet<Tp>> {
    let partitions = subscribed_partitions(members, topics);
    let mut out: BTreeMap<String, BTreeSet<Tp>> = members
        .keys()
        .map(|id| (id.clone(), BTreeSet::new()))
        .collect();
    let mut taken: BTreeSet<Tp> = BTreeSet::new();
    // 1. Stickiness: keep what is still subscribed (a partition kept once only).
    for (id, spec) in members {
        for tp in &spec.previous {
            if let Some(topic) = partitions.get(tp) {
                if spec.subscribed.contains(topic) && taken.insert(*tp) {
                    out.get_mut(id)
                        .expect("every member has an entry")
                        .insert(*tp);
                }
            }
        }
    }
    // 2. Free partitions to the least loaded eligible member.
    for (tp, topic) in &partitions {
        if taken.contains(tp) {
            continue;
        }
        let least = members
            .iter()
            .filter(|(_, spec)| spec.subscribed.contains(topic))
            .map(|(id, _)| id)
            .min_by_key(|id| (out[*id].len(), (*id).clone()));
        if let Some(id) = least {
            out.get_mut(id).expect("member").insert(*tp);
            taken.insert(*tp);
        }
    }
    // 3. Balance: move one partition at a time from a member with the most to one with at
    //    least two fewer that subscribes to its topic. Each move lowers the sum of squared
    //    counts, so this ends; bounded by the partition count squared.
    let bound = partitions.len() * partitions.len() + 1;
    for _ in 0..bound {
        let mut by_load: Vec<(&String, usize)> = out.iter().map(|(id, s)| (id, s.len())).collect();
        by_load.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let mut moved = None;
        'search: for (over, over_load) in &by_load {
            for (under, under_load) in by_load.iter().rev() {
                if *over_load < under_load + 2 {
                    break;
                }
                let subs = &members[*under].subscribed;
                if let Some(tp) = out[*over]
                    .iter()
                    .rev()
                    .find(|tp| subs.contains(&partitions[*tp]))
                {
                    moved = Some(((*over).clone(), (*under).clone(), *tp));
                    break 'search;
                }
            }
        }
        match moved {
            Some((from, to, tp)) => {
                out.get_mut(&from).expect("member").remove(&tp);
                out.get_mut(&to).expect("member").insert(tp);
            }
            None => break,
        }
    }
    out
}

/// Contiguous ranges per topic (see the module docs).
pub fn range(
    members: &BTreeMap<String, MemberSpec>,
    topics: &BTreeMap<String, TopicMeta>,
) -> BTreeMap<String, BTreeSet<Tp>> {
    let mut out: BTreeMap<String, BTreeSet<Tp>> = members
        .keys()
        .map(|id| (id.clone(), BTreeSet::new()))
        .collect();
    let names: BTreeSet<&String> = members.values().flat_map(|m| &m.subscribed).collect();
    for name in names {
        let Some(meta) = topics.get(name) else {
            continue;
        };
        let subscribers: Vec<&String> = members
            .iter()
            .filter(|(_, spec)| spec.subscribed.contains(name))
            .map(|(id, _)| id)
            .collect();
        let count = subscribers.len() as i32;
        let (per, extra) = (meta.partitions / count, meta.partitions % count);
        let mut next = 0;
        for (i, id) in subscribers.into_iter().enumerate() {
            let n = per + i32::from((i as i32) < extra);
            let set = out.get_mut(id).expect("member");
            for p in next..next + n {
                set.insert((meta.id, p));
            }
            next += n;
        }
        assert_eq!(next, meta.partitions);
    }
    out
}

/// Every subscribed partition is assigned once, to a member subscribed to its topic.
fn check_assignment(
    members: &BTreeMap<String, MemberSpec>,
    topics: &BTreeMap<String, TopicMeta>,
    out: &BTreeMap<String, BTreeSet<Tp>>,
) {
    let partitions = subscribed_partitions(members, topics);
    let mut seen = BTreeSet::new();
    for (id, set) in out {
        for tp in set {
            assert!(seen.insert(*tp), "{tp:?} assigned twice");
            assert!(
                members[id].subscribed.contains(&partitions[tp]),
                "{id} not subscribed to {tp:?}"
            );
        }
    }
    assert_eq!(
        seen.len(),
        partitions.len(),
        "every subscribed partition is assigned"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn topics(list: &[(&str, u128, i32)]) -> BTreeMap<String, TopicMeta> {
        list.iter()
            .map(|(name, id, partitions)| {
                (
                    name.to_string(),
                    TopicMeta {
                        id: Uuid::from_u128(*id),
                        partitions: *partitions,
                    },
                )
            })
            .collect()
    }

    fn member(subs: &[&str], previous: &[(u128, i32)]) -> MemberSpec {
        MemberSpec {
            subscribed: subs.iter().map(|s| s.to_string()).collect(),
            previous: previous
                .iter()
                .map(|(t, p)| (Uuid::from_u128(*t), *p))
                .collect(),
        }
    }

    fn counts(out: &BTreeMap<String, BTreeSet<Tp>>) -> Vec<usize> {
        out.values().map(BTreeSet::len).collect()
    }

    #[test]
    fn uniform_balances_and_sticks() {
        let t = topics(&[("a", 1, 5), ("b", 2, 2)]);
        let mut members = BTreeMap::new();
        members.insert("m1".to_string(), member(&["a", "b"], &[]));
        let one = Assignor::Uniform.assign(&members, &t);
        assert_eq!(counts(&one), vec![7]);
        // A second member: m1 keeps 4 of its 7, m2 gets 3; nothing else moves.
        members.get_mut("m1").unwrap().previous = one["m1"].clone();
        members.insert("m2".to_string(), member(&["a", "b"], &[]));
        let two = Assignor::Uniform.assign(&members, &t);
        assert_eq!(counts(&two), vec![4, 3]);
        assert!(two["m1"].is_subset(&one["m1"]));
        // m1 leaves: m2 keeps its 3 and gets the rest.
        let mut members2 = BTreeMap::new();
        members2.insert("m2".to_string(), member(&["a", "b"], &[]));
        members2.get_mut("m2").unwrap().previous = two["m2"].clone();
        let back = Assignor::Uniform.assign(&members2, &t);
        assert_eq!(counts(&back), vec![7]);
    }

    #[test]
    fn uniform_with_different_subscriptions() {
        let t = topics(&[("a", 1, 4), ("b", 2, 4)]);
        let mut members = BTreeMap::new();
        members.insert("m1".to_string(), member(&["a"], &[]));
        members.insert("m2".to_string(), member(&["a", "b"], &[]));
        members.insert("m3".to_string(), member(&["b"], &[]));
        let out = Assignor::Uniform.assign(&members, &t);
        let c = counts(&out);
        assert!(
            c.iter().max().unwrap() - c.iter().min().unwrap() <= 1,
            "{out:?}"
        );
        assert!(out["m1"].iter().all(|(id, _)| *id == Uuid::from_u128(1)));
        assert!(out["m3"].iter().all(|(id, _)| *id == Uuid::from_u128(2)));
    }

    #[test]
    fn range_gives_contiguous_ranges_by_member_id() {
        let t = topics(&[("a", 1, 5)]);
        let mut members = BTreeMap::new();
        members.insert("m2".to_string(), member(&["a"], &[]));
        members.insert("m1".to_string(), member(&["a"], &[]));
        let out = Assignor::Range.assign(&members, &t);
        let a = Uuid::from_u128(1);
        assert_eq!(out["m1"], [(a, 0), (a, 1), (a, 2)].into_iter().collect());
        assert_eq!(out["m2"], [(a, 3), (a, 4)].into_iter().collect());
    }

    #[test]
    fn unknown_topics_and_no_members() {
        let t = topics(&[("a", 1, 3)]);
        let mut members = BTreeMap::new();
        members.insert("m1".to_string(), member(&["nope"], &[(1, 0)]));
        for a in [Assignor::Uniform, Assignor::Range] {
            assert!(a.assign(&members, &t)["m1"].is_empty());
            assert!(a.assign(&BTreeMap::new(), &t).is_empty());
        }
    }
}
