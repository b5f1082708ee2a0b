//! The hook on encoded requests: pass, refuse whole, filter and merge.

use super::*;
use crate::model::ShardId;
use crate::protocol::apis::SUPPORTED_APIS;
use crate::security::authz::{AclBinding, PatternType, Permission};
use crate::shard::ops::{ShardOp, ShardReply};
use std::sync::Arc;

/// A bus that only knows the registry (the hook never calls shards).
struct RegistryBus(Arc<TopicRegistry>);

impl Bus for RegistryBus {
    fn local_shard(&self) -> ShardId {
        ShardId(0)
    }
    fn shard_count(&self) -> usize {
        1
    }
    fn registry(&self) -> Arc<TopicRegistry> {
        self.0.clone()
    }
    fn now_ms(&self) -> i64 {
        0
    }
    async fn call(&self, _shard: ShardId, _op: ShardOp) -> ShardReply {
        unreachable!("the hook runs no shard operation")
    }
    async fn sleep_ms(&self, _ms: u64) {}
}

fn registry(acls: Vec<AclBinding>) -> Arc<TopicRegistry> {
    let mut r = TopicRegistry::new("p18acl-cluster-id-xxxx".into());
    for (i, name) in ["a", "b"].iter().enumerate() {
        r.create_topic(name, Uuid::from_u128(i as u128 + 1), 1, &[])
            .unwrap();
    }
    for a in acls {
        r.acls.insert(a);
    }
    Arc::new(r)
}

fn allow(rt: ResourceType, name: &str, op: Operation) -> AclBinding {
    AclBinding {
        resource_type: rt,
        pattern_type: PatternType::Literal,
        resource_name: name.into(),
        principal: "User:alice".into(),
        host: "*".into(),
        operation: op,
        permission: Permission::Allow,
    }
}

fn conn(authorizer: bool) -> ConnInfo {
    let mut c = ConnInfo::new(
        "127.0.0.1:9092".parse().unwrap(),
        "127.0.0.1:40000".parse().unwrap(),
    );
    *c.principal.borrow_mut() = "User:alice".into();
    if authorizer {
        c.authorizer = Some(Arc::new(AuthorizerConfig::default()));
    }
    c
}

fn request<T: Encodable>(key: i16, version: i16, body: &T) -> Request {
    let spec = SUPPORTED_APIS.iter().find(|s| s.key == key).unwrap();
    let mut buf = BytesMut::new();
    body.encode(&mut buf, version).unwrap();
    Request {
        spec,
        api_version: version,
        correlation_id: 7,
        client_id: None,
        body: buf.freeze(),
    }
}

fn produce(topics: &[&str]) -> ProduceRequest {
    let mut r = ProduceRequest::default();
    r.acks = -1;
    r.topic_data = topics
        .iter()
        .map(|t| {
            let mut d = produce_request::TopicProduceData::default();
            d.name = TopicName(sb(t));
            let mut p = produce_request::PartitionProduceData::default();
            p.index = 0;
            d.partition_data = vec![p];
            d
        })
        .collect();
    r
}

#[test]
fn no_authorizer_passes_everything() {
    let bus = RegistryBus(registry(vec![]));
    let req = request(apis::PRODUCE, 9, &produce(&["a", "b"]));
    assert!(matches!(gate(&bus, &conn(false), &req), Gate::Pass));
}

#[test]
fn produce_runs_without_refused_topics_and_merges_their_errors() {
    let bus = RegistryBus(registry(vec![allow(
        ResourceType::Topic,
        "a",
        Operation::Write,
    )]));
    let req = request(apis::PRODUCE, 9, &produce(&["a", "b"]));
    let Gate::Filtered(inner, merge) = gate(&bus, &conn(true), &req) else {
        panic!("expected a filtered request");
    };
    let seen: ProduceRequest = decode_body(&inner).unwrap();
    assert_eq!(seen.topic_data.len(), 1);
    assert_eq!(seen.topic_data[0].name.as_str(), "a");
    // What the handler would answer for "a".
    let mut handled = ProduceResponse::default();
    let mut t = produce_response::TopicProduceResponse::default();
    t.name = TopicName(sb("a"));
    let mut p = produce_response::PartitionProduceResponse::default();
    p.base_offset = 5;
    t.partition_responses = vec![p];
    handled.responses = vec![t];
    let Outcome::Respond(frame) = merge(respond(&inner, &handled)) else {
        panic!("expected a response");
    };
    let merged: ProduceResponse = response_body(&req, &frame).unwrap();
    let codes: Vec<(String, i16)> = merged
        .responses
        .iter()
        .map(|t| (t.name.to_string(), t.partition_responses[0].error_code))
        .collect();
    assert_eq!(codes, vec![("a".into(), 0), ("b".into(), TOPIC_DENIED)]);
    // Nothing allowed: answered without the handler.
    let bus = RegistryBus(registry(vec![]));
    let Gate::Answer(Outcome::Respond(frame)) = gate(&bus, &conn(true), &req) else {
        panic!("expected an answer");
    };
    let r: ProduceResponse = response_body(&req, &frame).unwrap();
    assert!(r
        .responses
        .iter()
        .all(|t| t.partition_responses[0].error_code == TOPIC_DENIED));
}

#[test]
fn transactional_produce_needs_the_transactional_id() {
    let bus = RegistryBus(registry(vec![allow(
        ResourceType::Topic,
        "a",
        Operation::Write,
    )]));
    let mut body = produce(&["a"]);
    body.transactional_id = Some(TransactionalId(sb("tx")));
    let req = request(apis::PRODUCE, 9, &body);
    let Gate::Answer(Outcome::Respond(frame)) = gate(&bus, &conn(true), &req) else {
        panic!("expected an answer");
    };
    let r: ProduceResponse = response_body(&req, &frame).unwrap();
    assert_eq!(
        r.responses[0].partition_responses[0].error_code,
        TXN_ID_DENIED
    );
    let bus = RegistryBus(registry(vec![
        allow(ResourceType::Topic, "a", Operation::Write),
        allow(ResourceType::TransactionalId, "tx", Operation::Write),
    ]));
    assert!(matches!(gate(&bus, &conn(true), &req), Gate::Pass));
}

#[test]
fn group_apis_are_refused_whole() {
    let mut body = JoinGroupRequest::default();
    body.group_id = GroupId(sb("g"));
    body.protocol_type = sb("consumer");
    let req = request(apis::JOIN_GROUP, 5, &body);
    let bus = RegistryBus(registry(vec![]));
    let Gate::Answer(Outcome::Respond(frame)) = gate(&bus, &conn(true), &req) else {
        panic!("expected an answer");
    };
    let r: JoinGroupResponse = response_body(&req, &frame).unwrap();
    assert_eq!(r.error_code, GROUP_DENIED);
    let bus = RegistryBus(registry(vec![allow(
        ResourceType::Group,
        "g",
        Operation::Read,
    )]));
    assert!(matches!(gate(&bus, &conn(true), &req), Gate::Pass));
}

#[test]
fn metadata_hides_topics_of_an_all_topics_request_and_refuses_named_ones() {
    let bus = RegistryBus(registry(vec![allow(
        ResourceType::Topic,
        "a",
        Operation::Read,
    )]));
    // All topics: the handler runs, "b" is removed from its answer.
    let mut body = MetadataRequest::default();
    body.topics = None; // all topics (v1+)
    let req = request(apis::METADATA, 12, &body);
    let Gate::Filtered(inner, merge) = gate(&bus, &conn(true), &req) else {
        panic!("expected a filtered request");
    };
    let mut handled = MetadataResponse::default();
    for (i, name) in ["a", "b"].iter().enumerate() {
        let mut t = metadata_response::MetadataResponseTopic::default();
        t.name = Some(TopicName(sb(name)));
        t.topic_id = Uuid::from_u128(i as u128 + 1);
        handled.topics.push(t);
    }
    let Outcome::Respond(frame) = merge(respond(&inner, &handled)) else {
        panic!("expected a response");
    };
    let r: MetadataResponse = response_body(&req, &frame).unwrap();
    let names: Vec<String> = r
        .topics
        .iter()
        .map(|t| t.name.as_ref().unwrap().to_string())
        .collect();
    assert_eq!(names, vec!["a".to_string()]);
    // Named "b": TOPIC_AUTHORIZATION_FAILED, without its id.
    let mut body = MetadataRequest::default();
    let mut t = metadata_request::MetadataRequestTopic::default();
    t.name = Some(TopicName(sb("b")));
    body.topics = Some(vec![t]);
    let req = request(apis::METADATA, 12, &body);
    let Gate::Filtered(inner, merge) = gate(&bus, &conn(true), &req) else {
        panic!("expected a filtered request");
    };
    let seen: MetadataRequest = decode_body(&inner).unwrap();
    assert_eq!(seen.topics.as_ref().map(Vec::len), Some(0));
    let Outcome::Respond(frame) = merge(respond(&inner, &MetadataResponse::default())) else {
        panic!("expected a response");
    };
    let r: MetadataResponse = response_body(&req, &frame).unwrap();
    assert_eq!(r.topics.len(), 1);
    assert_eq!(r.topics[0].error_code, TOPIC_DENIED);
    assert!(r.topics[0].topic_id.is_nil());
}

#[test]
fn acl_apis_need_cluster_alter() {
    let mut body = CreateAclsRequest::default();
    let mut c = create_acls_request::AclCreation::default();
    c.resource_type = 2;
    c.resource_name = sb("a");
    c.resource_pattern_type = 3;
    c.principal = sb("User:bob");
    c.host = sb("*");
    c.operation = 3;
    c.permission_type = 3;
    body.creations = vec![c];
    let req = request(apis::CREATE_ACLS, 3, &body);
    let bus = RegistryBus(registry(vec![]));
    let Gate::Answer(Outcome::Respond(frame)) = gate(&bus, &conn(true), &req) else {
        panic!("expected an answer");
    };
    let r: CreateAclsResponse = response_body(&req, &frame).unwrap();
    assert_eq!(r.results[0].error_code, CLUSTER_DENIED);
    let bus = RegistryBus(registry(vec![allow(
        ResourceType::Cluster,
        CLUSTER_NAME,
        Operation::Alter,
    )]));
    assert!(matches!(gate(&bus, &conn(true), &req), Gate::Pass));
}

#[test]
fn scram_credentials_need_cluster_alter_and_describe() {
    let mut alter = AlterUserScramCredentialsRequest::default();
    let mut up = alter_user_scram_credentials_request::ScramCredentialUpsertion::default();
    up.name = sb("mallory");
    up.mechanism = 1;
    up.iterations = 8192;
    alter.upsertions = vec![up];
    let req = request(apis::ALTER_USER_SCRAM_CREDENTIALS, 0, &alter);
    // alice has no CLUSTER ACL: refused per user, nothing stored.
    let bus = RegistryBus(registry(vec![]));
    let Gate::Answer(Outcome::Respond(frame)) = gate(&bus, &conn(true), &req) else {
        panic!("expected an answer");
    };
    let resp: AlterUserScramCredentialsResponse = response_body(&req, &frame).unwrap();
    let codes: Vec<(String, i16)> = resp
        .results
        .iter()
        .map(|r| (r.user.to_string(), r.error_code))
        .collect();
    assert_eq!(codes, vec![("mallory".into(), CLUSTER_DENIED)]);
    let describe = request(
        apis::DESCRIBE_USER_SCRAM_CREDENTIALS,
        0,
        &DescribeUserScramCredentialsRequest::default(),
    );
    let Gate::Answer(Outcome::Respond(frame)) = gate(&bus, &conn(true), &describe) else {
        panic!("expected an answer");
    };
    let resp: DescribeUserScramCredentialsResponse = response_body(&describe, &frame).unwrap();
    assert_eq!(resp.error_code, CLUSTER_DENIED);
    // With CLUSTER ALTER both pass (ALTER implies DESCRIBE).
    let bus = RegistryBus(registry(vec![allow(
        ResourceType::Cluster,
        CLUSTER_NAME,
        Operation::Alter,
    )]));
    assert!(matches!(gate(&bus, &conn(true), &req), Gate::Pass));
    assert!(matches!(gate(&bus, &conn(true), &describe), Gate::Pass));
}

#[test]
fn transaction_apis_need_transactional_id_write() {
    let mut end = EndTxnRequest::default();
    end.transactional_id = TransactionalId(sb("t1"));
    end.committed = true;
    let req = request(apis::END_TXN, 3, &end);
    let bus = RegistryBus(registry(vec![]));
    let Gate::Answer(Outcome::Respond(frame)) = gate(&bus, &conn(true), &req) else {
        panic!("expected an answer");
    };
    let resp: EndTxnResponse = response_body(&req, &frame).unwrap();
    assert_eq!(resp.error_code, TXN_ID_DENIED);
    let txn_write = allow(ResourceType::TransactionalId, "t1", Operation::Write);
    let bus = RegistryBus(registry(vec![txn_write.clone()]));
    assert!(matches!(gate(&bus, &conn(true), &req), Gate::Pass));
    // AddPartitionsToTxn v3: the refused topic TOPIC_AUTHORIZATION_FAILED, the other one
    // OPERATION_NOT_ATTEMPTED.
    let mut add = AddPartitionsToTxnRequest::default();
    add.v3_and_below_transactional_id = TransactionalId(sb("t1"));
    add.v3_and_below_topics = ["a", "b"]
        .iter()
        .map(|t| {
            let mut x = add_partitions_to_txn_request::AddPartitionsToTxnTopic::default();
            x.name = TopicName(sb(t));
            x.partitions = vec![0];
            x
        })
        .collect();
    let req = request(apis::ADD_PARTITIONS_TO_TXN, 3, &add);
    let bus = RegistryBus(registry(vec![
        txn_write,
        allow(ResourceType::Topic, "a", Operation::Write),
    ]));
    let Gate::Answer(Outcome::Respond(frame)) = gate(&bus, &conn(true), &req) else {
        panic!("expected an answer");
    };
    let resp: AddPartitionsToTxnResponse = response_body(&req, &frame).unwrap();
    let codes: Vec<(String, i16)> = resp
        .results_by_topic_v3_and_below
        .iter()
        .map(|t| {
            (
                t.name.to_string(),
                t.results_by_partition[0].partition_error_code,
            )
        })
        .collect();
    assert_eq!(codes, vec![("a".into(), 55), ("b".into(), TOPIC_DENIED)]);
}

#[test]
fn list_answers_hide_what_the_principal_may_not_describe() {
    let bus = RegistryBus(registry(vec![
        allow(ResourceType::TransactionalId, "t1", Operation::Describe),
        allow(ResourceType::Group, "g1", Operation::Describe),
    ]));
    // ListTransactions: the handler's answer keeps only t1.
    let req = request(
        apis::LIST_TRANSACTIONS,
        1,
        &ListTransactionsRequest::default(),
    );
    let Gate::Filtered(inner, merge) = gate(&bus, &conn(true), &req) else {
        panic!("expected a rewritten answer");
    };
    let mut handled = ListTransactionsResponse::default();
    handled.transaction_states = ["t1", "t2"]
        .iter()
        .map(|id| {
            let mut t = list_transactions_response::TransactionState::default();
            t.transactional_id = TransactionalId(sb(id));
            t.transaction_state = sb("Ongoing");
            t
        })
        .collect();
    let Outcome::Respond(frame) = merge(respond(&inner, &handled)) else {
        panic!("expected a response");
    };
    let seen: ListTransactionsResponse = response_body(&req, &frame).unwrap();
    let ids: Vec<String> = seen
        .transaction_states
        .iter()
        .map(|t| t.transactional_id.to_string())
        .collect();
    assert_eq!(ids, vec!["t1".to_string()]);
    // ListGroups without CLUSTER DESCRIBE: only g1.
    let req = request(apis::LIST_GROUPS, 4, &ListGroupsRequest::default());
    let Gate::Filtered(inner, merge) = gate(&bus, &conn(true), &req) else {
        panic!("expected a rewritten answer");
    };
    let mut handled = ListGroupsResponse::default();
    handled.groups = ["g1", "g2"]
        .iter()
        .map(|g| {
            let mut x = list_groups_response::ListedGroup::default();
            x.group_id = GroupId(sb(g));
            x
        })
        .collect();
    let Outcome::Respond(frame) = merge(respond(&inner, &handled)) else {
        panic!("expected a response");
    };
    let seen: ListGroupsResponse = response_body(&req, &frame).unwrap();
    let groups: Vec<String> = seen.groups.iter().map(|g| g.group_id.to_string()).collect();
    assert_eq!(groups, vec!["g1".to_string()]);
}

/// Runs `gate` on `req` and, when the handler runs, `handler` on what it is given; the answer.
fn answered<R: Decodable>(
    bus: &RegistryBus,
    req: &Request,
    handler: impl FnOnce(&Request) -> Outcome,
) -> R {
    let outcome = match gate(bus, &conn(true), req) {
        Gate::Pass => handler(req),
        Gate::Filtered(inner, merge) => merge(handler(&inner)),
        Gate::Answer(outcome) => outcome,
    };
    let Outcome::Respond(frame) = outcome else {
        panic!("expected a response");
    };
    response_body(req, &frame).expect("a response to the request")
}

fn metadata_handler(registry: Arc<TopicRegistry>) -> impl FnOnce(&Request) -> Outcome {
    move |r: &Request| {
        let body: MetadataRequest = decode_body(r).unwrap();
        let resp = crate::server::metadata::metadata_response(
            &registry,
            &body,
            r.api_version,
            &conn(true),
        );
        respond(r, &resp)
    }
}

#[test]
fn metadata_reports_the_principals_topic_and_cluster_operations() {
    use Operation::*;
    let field = |ops: &[Operation]| crate::security::authz::operations_field(ops.iter().copied());
    let reg = registry(vec![
        allow(ResourceType::Topic, "a", Read),
        allow(ResourceType::Topic, "a", AlterConfigs),
        allow(ResourceType::Topic, "b", Describe),
    ]);
    let bus = RegistryBus(reg.clone());
    let mut body = MetadataRequest::default();
    body.topics = Some(
        ["a", "b"]
            .iter()
            .map(|t| {
                let mut m = metadata_request::MetadataRequestTopic::default();
                m.name = Some(TopicName(sb(t)));
                m
            })
            .collect(),
    );
    body.include_topic_authorized_operations = true;
    body.include_cluster_authorized_operations = true;
    let req = request(apis::METADATA, 10, &body);
    let resp: MetadataResponse = answered(&bus, &req, metadata_handler(reg.clone()));
    let ops: Vec<(String, i32)> = resp
        .topics
        .iter()
        .map(|t| {
            (
                t.name.as_ref().unwrap().to_string(),
                t.topic_authorized_operations,
            )
        })
        .collect();
    assert_eq!(
        ops,
        vec![
            (
                "a".into(),
                field(&[Read, Describe, AlterConfigs, DescribeConfigs])
            ),
            ("b".into(), field(&[Describe])),
        ]
    );
    // No CLUSTER DESCRIBE: 0, as Kafka.
    assert_eq!(resp.cluster_authorized_operations, 0);

    // A refused topic keeps INT32_MIN beside the narrowed one; the cluster's with ALTER.
    let reg = registry(vec![
        allow(ResourceType::Topic, "a", Write),
        allow(ResourceType::Cluster, CLUSTER_NAME, Alter),
    ]);
    let bus = RegistryBus(reg.clone());
    let resp: MetadataResponse = answered(&bus, &req, metadata_handler(reg.clone()));
    let ops: Vec<(String, i16, i32)> = resp
        .topics
        .iter()
        .map(|t| {
            (
                t.name.as_ref().unwrap().to_string(),
                t.error_code,
                t.topic_authorized_operations,
            )
        })
        .collect();
    assert_eq!(
        ops,
        vec![
            ("a".into(), 0, field(&[Write, Describe])),
            ("b".into(), TOPIC_DENIED, i32::MIN),
        ]
    );
    assert_eq!(
        resp.cluster_authorized_operations,
        field(&[Alter, Describe])
    );

    // Not asked for: the gate leaves the request alone.
    body.include_topic_authorized_operations = false;
    body.include_cluster_authorized_operations = false;
    body.topics.as_mut().unwrap().truncate(1);
    let req = request(apis::METADATA, 10, &body);
    assert!(matches!(gate(&bus, &conn(true), &req), Gate::Pass));
}

#[test]
fn describes_report_the_principals_group_and_cluster_operations() {
    use Operation::*;
    let field = |ops: &[Operation]| crate::security::authz::operations_field(ops.iter().copied());
    let all = ResourceType::Group.all_operations();
    let reg = registry(vec![
        allow(ResourceType::Group, "g", Read),
        allow(ResourceType::Group, "h", Delete),
        allow(ResourceType::Cluster, CLUSTER_NAME, Describe),
    ]);
    let bus = RegistryBus(reg.clone());
    let groups = || vec![GroupId(sb("g")), GroupId(sb("h")), GroupId(sb("x"))];

    // DescribeGroups v5: the handler answers the two allowed groups (dead, no error before v6)
    // with every operation; "x" is refused.
    let mut body = DescribeGroupsRequest::default();
    body.groups = groups();
    body.include_authorized_operations = true;
    let req = request(apis::DESCRIBE_GROUPS, 5, &body);
    let resp: DescribeGroupsResponse = answered(&bus, &req, |r| {
        let seen: DescribeGroupsRequest = decode_body(r).unwrap();
        let mut out = DescribeGroupsResponse::default();
        out.groups = seen
            .groups
            .iter()
            .map(|g| crate::server::group_admin::described_group(g, Ok(None), 5, true))
            .collect();
        respond(r, &out)
    });
    let ops: Vec<(String, i16, i32)> = resp
        .groups
        .iter()
        .map(|g| {
            (
                g.group_id.to_string(),
                g.error_code,
                g.authorized_operations,
            )
        })
        .collect();
    assert_eq!(
        ops,
        vec![
            ("g".into(), 0, field(&[Read, Describe])),
            ("h".into(), 0, field(&[Delete, Describe])),
            ("x".into(), GROUP_DENIED, i32::MIN),
        ]
    );

    // ShareGroupDescribe and ConsumerGroupDescribe: the same narrowing; a group the handler
    // answers with an error keeps INT32_MIN.
    let mut body = ShareGroupDescribeRequest::default();
    body.group_ids = groups();
    body.include_authorized_operations = true;
    let req = request(apis::SHARE_GROUP_DESCRIBE, 1, &body);
    let resp: ShareGroupDescribeResponse = answered(&bus, &req, |r| {
        let seen: ShareGroupDescribeRequest = decode_body(r).unwrap();
        let mut out = ShareGroupDescribeResponse::default();
        out.groups = seen
            .group_ids
            .iter()
            .map(|g| {
                let mut d = share_group_describe_response::DescribedGroup::default();
                d.group_id = g.clone();
                if g.as_str() == "h" {
                    d.error_code = 69; // GROUP_ID_NOT_FOUND
                    d.authorized_operations = i32::MIN;
                } else {
                    d.authorized_operations = all;
                }
                d
            })
            .collect();
        respond(r, &out)
    });
    let ops: Vec<(String, i32)> = resp
        .groups
        .iter()
        .map(|g| (g.group_id.to_string(), g.authorized_operations))
        .collect();
    assert_eq!(
        ops,
        vec![
            ("g".into(), field(&[Read, Describe])),
            ("h".into(), i32::MIN),
            ("x".into(), i32::MIN),
        ]
    );
    let mut body = ConsumerGroupDescribeRequest::default();
    body.group_ids = vec![GroupId(sb("h"))];
    body.include_authorized_operations = true;
    let req = request(apis::CONSUMER_GROUP_DESCRIBE, 0, &body);
    let resp: ConsumerGroupDescribeResponse = answered(&bus, &req, |r| {
        let mut out = ConsumerGroupDescribeResponse::default();
        let mut d = consumer_group_describe_response::DescribedGroup::default();
        d.group_id = GroupId(sb("h"));
        d.authorized_operations = all;
        out.groups = vec![d];
        respond(r, &out)
    });
    assert_eq!(
        resp.groups[0].authorized_operations,
        field(&[Delete, Describe])
    );

    // DescribeCluster with CLUSTER DESCRIBE only.
    let mut body = DescribeClusterRequest::default();
    body.include_cluster_authorized_operations = true;
    let req = request(apis::DESCRIBE_CLUSTER, 1, &body);
    let resp: DescribeClusterResponse = answered(&bus, &req, |r| {
        let seen: DescribeClusterRequest = decode_body(r).unwrap();
        let out =
            crate::server::cluster_admin::describe_cluster_response(&reg, &seen, 1, &conn(true));
        respond(r, &out)
    });
    assert_eq!(resp.cluster_authorized_operations, field(&[Describe]));
}
