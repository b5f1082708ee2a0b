//! The authorizer against Kafka's documented cases and against a brute-force model.

use super::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn acl(
    rt: ResourceType,
    pt: PatternType,
    name: &str,
    principal: &str,
    host: &str,
    op: Operation,
    perm: Permission,
) -> AclBinding {
    AclBinding {
        resource_type: rt,
        pattern_type: pt,
        resource_name: name.into(),
        principal: principal.into(),
        host: host.into(),
        operation: op,
        permission: perm,
    }
}

fn allow_topic(name: &str, pt: PatternType, principal: &str, op: Operation) -> AclBinding {
    acl(
        ResourceType::Topic,
        pt,
        name,
        principal,
        "*",
        op,
        Permission::Allow,
    )
}

const ALICE: Requester = Requester {
    principal: "User:alice",
    host: "127.0.0.1",
};
const BOB: Requester = Requester {
    principal: "User:bob",
    host: "127.0.0.1",
};

fn set(acls: Vec<AclBinding>) -> AclSet {
    let mut s = AclSet::default();
    for a in acls {
        s.insert(a);
    }
    s
}

#[test]
fn no_acls_follow_allow_everyone_and_super_users_bypass() {
    let acls = AclSet::default();
    let mut config = AuthorizerConfig::default();
    let authz = Authorizer {
        config: &config,
        acls: &acls,
    };
    assert!(!authz.authorize(ALICE, Operation::Read, ResourceType::Topic, "t"));
    config.allow_if_no_acl = true;
    let authz = Authorizer {
        config: &config,
        acls: &acls,
    };
    assert!(authz.authorize(ALICE, Operation::Read, ResourceType::Topic, "t"));
    let mut config = AuthorizerConfig::default();
    config.super_users = AuthorizerConfig::parse_super_users("User:admin; User:alice").unwrap();
    let authz = Authorizer {
        config: &config,
        acls: &acls,
    };
    assert!(authz.authorize(
        ALICE,
        Operation::Alter,
        ResourceType::Cluster,
        "kafka-cluster"
    ));
    assert!(!authz.authorize(BOB, Operation::Read, ResourceType::Topic, "t"));
    assert!(AuthorizerConfig::parse_super_users("alice").is_err());
}

#[test]
fn an_acl_on_the_resource_turns_off_allow_everyone() {
    let acls = set(vec![allow_topic(
        "t",
        PatternType::Literal,
        "User:alice",
        Operation::Read,
    )]);
    let config = AuthorizerConfig {
        allow_if_no_acl: true,
        ..Default::default()
    };
    let authz = Authorizer {
        config: &config,
        acls: &acls,
    };
    assert!(authz.authorize(ALICE, Operation::Read, ResourceType::Topic, "t"));
    assert!(!authz.authorize(BOB, Operation::Read, ResourceType::Topic, "t"));
    assert!(authz.authorize(BOB, Operation::Read, ResourceType::Topic, "other"));
}

#[test]
fn implications_hold_for_allow_only() {
    let config = AuthorizerConfig::default();
    let acls = set(vec![
        allow_topic("t", PatternType::Literal, "User:alice", Operation::Write),
        allow_topic(
            "t",
            PatternType::Literal,
            "User:alice",
            Operation::AlterConfigs,
        ),
        acl(
            ResourceType::Topic,
            PatternType::Literal,
            "t",
            "User:bob",
            "*",
            Operation::Read,
            Permission::Deny,
        ),
        allow_topic("t", PatternType::Literal, "User:bob", Operation::Describe),
    ]);
    let authz = Authorizer {
        config: &config,
        acls: &acls,
    };
    assert!(authz.authorize(ALICE, Operation::Describe, ResourceType::Topic, "t"));
    assert!(authz.authorize(ALICE, Operation::DescribeConfigs, ResourceType::Topic, "t"));
    assert!(!authz.authorize(ALICE, Operation::Read, ResourceType::Topic, "t"));
    // Bob's DENY READ does not deny his DESCRIBE.
    assert!(authz.authorize(BOB, Operation::Describe, ResourceType::Topic, "t"));
    assert!(!authz.authorize(BOB, Operation::Read, ResourceType::Topic, "t"));
}

#[test]
fn deny_beats_allow_and_prefixes_and_wildcards_match() {
    let config = AuthorizerConfig::default();
    let acls = set(vec![
        allow_topic("orders-", PatternType::Prefixed, "User:*", Operation::All),
        acl(
            ResourceType::Topic,
            PatternType::Literal,
            "orders-secret",
            "User:bob",
            "*",
            Operation::Write,
            Permission::Deny,
        ),
        allow_topic("*", PatternType::Literal, "User:alice", Operation::Read),
        acl(
            ResourceType::Group,
            PatternType::Literal,
            "g",
            "User:bob",
            "10.0.0.1",
            Operation::Read,
            Permission::Allow,
        ),
    ]);
    let authz = Authorizer {
        config: &config,
        acls: &acls,
    };
    assert!(authz.authorize(BOB, Operation::Write, ResourceType::Topic, "orders-1"));
    assert!(!authz.authorize(BOB, Operation::Write, ResourceType::Topic, "orders-secret"));
    assert!(authz.authorize(
        ALICE,
        Operation::Write,
        ResourceType::Topic,
        "orders-secret"
    ));
    assert!(!authz.authorize(BOB, Operation::Read, ResourceType::Topic, "order"));
    assert!(authz.authorize(ALICE, Operation::Read, ResourceType::Topic, "anything"));
    // Host-specific ACL.
    assert!(!authz.authorize(BOB, Operation::Read, ResourceType::Group, "g"));
    let from_there = Requester {
        principal: "User:bob",
        host: "10.0.0.1",
    };
    assert!(authz.authorize(from_there, Operation::Read, ResourceType::Group, "g"));
    // authorize_any: Bob may WRITE some topic (orders-*); only Bob has a group ACL.
    assert!(authz.authorize_any(BOB, Operation::Write, ResourceType::Topic));
    assert!(!authz.authorize_any(ALICE, Operation::Read, ResourceType::Group));
}

#[test]
fn wire_validation_follows_kafka() {
    let ok = AclBinding::from_wire(2, "t", 3, "User:a", "*", 3, 3).unwrap();
    assert_eq!(ok.operation, Operation::Read);
    assert!(AclBinding::from_wire(1, "t", 3, "User:a", "*", 3, 3).is_err()); // ANY type
    assert!(AclBinding::from_wire(2, "t", 2, "User:a", "*", 3, 3).is_err()); // MATCH
    assert!(AclBinding::from_wire(2, "", 3, "User:a", "*", 3, 3).is_err());
    assert!(AclBinding::from_wire(2, "t", 3, "alice", "*", 3, 3).is_err());
    assert!(AclBinding::from_wire(4, "c", 3, "User:a", "*", 5, 3).is_err()); // CLUSTER name
    assert!(AclBinding::from_wire(4, "kafka-cluster", 3, "User:a", "*", 5, 3).is_ok());
    assert!(AclBinding::from_wire(3, "g", 3, "User:a", "*", 4, 3).is_err()); // GROUP WRITE
    assert!(AclBinding::from_wire(2, "t", 3, "User:a", "*", 1, 3).is_err()); // op ANY
    let f = AclFilter::from_wire(1, None, 1, None, None, 1, 1).unwrap();
    assert!(f.matches(&ok));
    let f = AclFilter::from_wire(2, Some("tx"), 2, None, None, 1, 1).unwrap();
    assert!(!f.matches(&ok));
    assert!(AclFilter::from_wire(2, None, 0, None, None, 1, 1).is_err());
}

#[test]
fn filters_match_as_kafka_and_delete_removes_what_matches() {
    let mut acls = set(vec![
        allow_topic("foo", PatternType::Literal, "User:a", Operation::Read),
        allow_topic("fo", PatternType::Prefixed, "User:a", Operation::Read),
        allow_topic("*", PatternType::Literal, "User:a", Operation::Read),
        allow_topic("bar", PatternType::Literal, "User:a", Operation::Read),
    ]);
    let matching = |f: &AclFilter, acls: &AclSet| acls.iter().filter(|a| f.matches(a)).count();
    let m = AclFilter::from_wire(2, Some("foo"), 2, None, None, 1, 1).unwrap();
    assert_eq!(matching(&m, &acls), 3);
    let any = AclFilter::from_wire(2, Some("foo"), 1, None, None, 1, 1).unwrap();
    assert_eq!(matching(&any, &acls), 1);
    let prefixed = AclFilter::from_wire(1, None, 4, None, None, 1, 1).unwrap();
    assert_eq!(matching(&prefixed, &acls), 1);
    let removed = acls.remove_matching(&m);
    assert_eq!(removed.len(), 3);
    assert_eq!(acls.len(), 1);
}

/// The model: a plain list, every ACL checked against the definition of a decision.
fn model_decision(
    acls: &[AclBinding],
    config: &AuthorizerConfig,
    who: Requester,
    op: Operation,
    rt: ResourceType,
    name: &str,
) -> bool {
    if config.super_users.contains(who.principal) {
        return true;
    }
    let on_resource: Vec<&AclBinding> = acls
        .iter()
        .filter(|a| {
            a.resource_type == rt
                && match a.pattern_type {
                    PatternType::Literal => a.resource_name == name || a.resource_name == "*",
                    PatternType::Prefixed => name.starts_with(a.resource_name.as_str()),
                }
        })
        .collect();
    let mine = |a: &&&AclBinding| {
        (a.principal == who.principal || a.principal == "User:*")
            && (a.host == "*" || a.host == who.host)
    };
    let denied = on_resource.iter().filter(mine).any(|a| {
        a.permission == Permission::Deny && (a.operation == op || a.operation == Operation::All)
    });
    let implied = |acl_op: Operation| match op {
        Operation::Describe => [
            Operation::Read,
            Operation::Write,
            Operation::Delete,
            Operation::Alter,
        ]
        .contains(&acl_op),
        Operation::DescribeConfigs => acl_op == Operation::AlterConfigs,
        _ => false,
    };
    let allowed = on_resource.iter().filter(mine).any(|a| {
        a.permission == Permission::Allow
            && (a.operation == op || a.operation == Operation::All || implied(a.operation))
    });
    !denied && (allowed || (on_resource.is_empty() && config.allow_if_no_acl))
}

#[test]
fn decisions_agree_with_a_brute_force_model() {
    const NAMES: [&str; 6] = ["a", "ab", "abc", "b", "*", "ba"];
    const PRINCIPALS: [&str; 4] = ["User:a", "User:b", "User:*", "User:c"];
    const HOSTS: [&str; 3] = ["*", "10.0.0.1", "10.0.0.2"];
    let seed: u64 = std::env::var("LOCKSTEP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x0ac1);
    println!("seed {seed}");
    let mut rng = SmallRng::seed_from_u64(seed);
    for round in 0..400 {
        let mut list: Vec<AclBinding> = Vec::new();
        let mut acls = AclSet::default();
        let count = rng.gen_range(0..12);
        for _ in 0..count {
            let rt = ResourceType::ALL[rng.gen_range(0..2)];
            let a = acl(
                rt,
                if rng.gen_bool(0.5) {
                    PatternType::Literal
                } else {
                    PatternType::Prefixed
                },
                NAMES[rng.gen_range(0..NAMES.len())],
                PRINCIPALS[rng.gen_range(0..3)],
                HOSTS[rng.gen_range(0..HOSTS.len())],
                Operation::ALL_OPS[rng.gen_range(0..Operation::ALL_OPS.len())],
                if rng.gen_bool(0.3) {
                    Permission::Deny
                } else {
                    Permission::Allow
                },
            );
            if acls.insert(a.clone()) {
                list.push(a);
            }
        }
        // Sometimes delete by a random filter, from both.
        if rng.gen_bool(0.3) {
            let f = AclFilter {
                resource_type: None,
                resource_name: Some(NAMES[rng.gen_range(0..NAMES.len())].to_string()),
                pattern: [
                    PatternFilter::Any,
                    PatternFilter::Match,
                    PatternFilter::Exactly(PatternType::Literal),
                    PatternFilter::Exactly(PatternType::Prefixed),
                ][rng.gen_range(0..4)],
                principal: None,
                host: None,
                operation: None,
                permission: None,
            };
            let removed = acls.remove_matching(&f);
            let before = list.len();
            list.retain(|a| !f.matches(a));
            assert_eq!(before - list.len(), removed.len(), "round {round}");
        }
        let config = AuthorizerConfig {
            super_users: if rng.gen_bool(0.2) {
                ["User:c".to_string()].into()
            } else {
                HashSet::new()
            },
            allow_if_no_acl: rng.gen_bool(0.5),
        };
        let authz = Authorizer {
            config: &config,
            acls: &acls,
        };
        for principal in ["User:a", "User:b", "User:c"] {
            for host in ["10.0.0.1", "10.0.0.2"] {
                let who = Requester { principal, host };
                for rt in [ResourceType::Topic, ResourceType::Group] {
                    for name in ["a", "ab", "abc", "b", "bab", "x"] {
                        for op in Operation::ALL_OPS.into_iter().skip(1) {
                            assert_eq!(
                                authz.authorize(who, op, rt, name),
                                model_decision(&list, &config, who, op, rt, name),
                                "seed {seed} round {round}: {who:?} {op:?} {rt:?} {name} with {list:#?}"
                            );
                        }
                        // The authorized-operations field is the model's decisions, bit by bit.
                        let field: i32 = rt
                            .described_operations()
                            .filter(|op| model_decision(&list, &config, who, *op, rt, name))
                            .map(|op| 1 << op.code())
                            .sum();
                        assert_eq!(
                            authz.authorized_operations(who, rt, name),
                            field,
                            "seed {seed} round {round}: {who:?} {rt:?} {name}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn authorized_operations_as_kafka_reports_them() {
    use Operation::*;
    // Without an authorizer: every supported operation, as Kafka 4.4 answers (measured on the
    // reference broker with librdkafka's describe_cluster / describe_topics /
    // describe_consumer_groups): CLUSTER 0x1fa0, TOPIC 0xdf8, GROUP 0xd48.
    assert_eq!(ResourceType::Cluster.all_operations(), 0x1fa0);
    assert_eq!(
        ResourceType::Topic.all_operations(),
        operations_field([
            Read,
            Write,
            Create,
            Delete,
            Alter,
            Describe,
            DescribeConfigs,
            AlterConfigs
        ])
    );
    assert_eq!(ResourceType::Topic.all_operations(), 0xdf8);
    assert_eq!(ResourceType::Group.all_operations(), 0xd48);
    assert_eq!(OPERATIONS_NOT_REQUESTED, -2147483648);

    let acls = set(vec![
        allow_topic("t", PatternType::Literal, "User:alice", Read),
        allow_topic("t", PatternType::Literal, "User:alice", AlterConfigs),
        acl(
            ResourceType::Topic,
            PatternType::Literal,
            "t",
            "User:alice",
            "*",
            Describe,
            Permission::Deny,
        ),
        allow_topic("t", PatternType::Literal, "User:bob", Read),
        acl(
            ResourceType::Group,
            PatternType::Prefixed,
            "g",
            "User:bob",
            "*",
            All,
            Permission::Allow,
        ),
    ]);
    let mut config = AuthorizerConfig::default();
    let authz = Authorizer {
        config: &config,
        acls: &acls,
    };
    // READ implies DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS; a DENY of DESCRIBE wins.
    assert_eq!(
        authz.authorized_operations(ALICE, ResourceType::Topic, "t"),
        operations_field([Read, AlterConfigs, DescribeConfigs])
    );
    assert_eq!(
        authz.authorized_operations(BOB, ResourceType::Topic, "t"),
        operations_field([Read, Describe])
    );
    // ALL on a prefix: every group operation of every group under it, none elsewhere.
    assert_eq!(
        authz.authorized_operations(BOB, ResourceType::Group, "g-1"),
        ResourceType::Group.all_operations()
    );
    assert_eq!(
        authz.authorized_operations(BOB, ResourceType::Group, "h"),
        0
    );
    assert_eq!(
        authz.authorized_operations(ALICE, ResourceType::Cluster, "kafka-cluster"),
        0
    );
    config.super_users.insert("User:alice".into());
    let authz = Authorizer {
        config: &config,
        acls: &acls,
    };
    assert_eq!(
        authz.authorized_operations(ALICE, ResourceType::Cluster, "kafka-cluster"),
        0x1fa0
    );
}
