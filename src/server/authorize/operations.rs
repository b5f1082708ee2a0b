//! Authorized operations (KIP-430) under an authorizer: the principal's, not every one.
//!
//! Handlers fill an asked-for `AuthorizedOperations` field with every operation the resource
//! type supports (what Kafka answers without an authorizer) and leave INT32_MIN where Kafka
//! does (not asked for; a group answered with an error; a topic id that is unknown or refused).
//! With an authorizer, [`narrow`] wraps the request's gate so that each filled field of the
//! answer is replaced by `Authorizer::authorized_operations` for the connection's principal, as
//! Kafka's `AuthHelper.authorizedOperations` computes it:
//!
//! | API | field | resource |
//! | --- | --- | --- |
//! | Metadata v8+ `IncludeTopicAuthorizedOperations` | each topic's | TOPIC |
//! | Metadata v8–10 `IncludeClusterAuthorizedOperations` | `ClusterAuthorizedOperations` | CLUSTER, 0 without CLUSTER DESCRIBE |
//! | DescribeCluster `IncludeClusterAuthorizedOperations` | `ClusterAuthorizedOperations` | CLUSTER, 0 without CLUSTER DESCRIBE |
//! | DescribeGroups v3+, ConsumerGroupDescribe, ShareGroupDescribe `IncludeAuthorizedOperations` | each group's | GROUP |
//!
//! Refused items (added by the table of `authorize` with INT32_MIN) are left alone, and a
//! request refused as a whole is not touched.

use super::{respond, response_body, Gate, Merge, CLUSTER_NAME};
use crate::protocol::apis;
use crate::protocol::codec::{decode_body, Request};
use crate::security::authz::{
    Authorizer, AuthorizerConfig, Operation, Requester, ResourceType, OPERATIONS_NOT_REQUESTED,
};
use crate::server::Outcome;
use crate::shard::registry::TopicRegistry;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable};
use std::sync::Arc;

/// Who asks, with the authorizer and the ACLs of the request's registry snapshot, owned so
/// the answer can be edited after the handler ran.
pub(super) struct Principal {
    pub config: Arc<AuthorizerConfig>,
    pub registry: Arc<TopicRegistry>,
    pub principal: String,
    pub host: String,
}

impl Principal {
    fn authorizer(&self) -> Authorizer<'_> {
        Authorizer {
            config: &self.config,
            acls: &self.registry.acls,
        }
    }

    fn who(&self) -> Requester<'_> {
        Requester {
            principal: &self.principal,
            host: &self.host,
        }
    }

    /// The field for `name` of `rt` (the handler filled it: it was asked for).
    pub fn operations(&self, rt: ResourceType, name: &str) -> i32 {
        self.authorizer()
            .authorized_operations(self.who(), rt, name)
    }

    /// The CLUSTER field: 0 unless the principal may DESCRIBE the cluster (Kafka's
    /// Metadata and DescribeCluster).
    pub fn cluster_operations(&self) -> i32 {
        let authz = self.authorizer();
        if authz.authorize(
            self.who(),
            Operation::Describe,
            ResourceType::Cluster,
            CLUSTER_NAME,
        ) {
            authz.authorized_operations(self.who(), ResourceType::Cluster, CLUSTER_NAME)
        } else {
            0
        }
    }

    /// `field` narrowed to the principal's operations on `name`, if it was filled.
    fn narrow(&self, field: &mut i32, rt: ResourceType, name: &str) {
        if *field != OPERATIONS_NOT_REQUESTED {
            *field = match rt {
                ResourceType::Cluster => self.cluster_operations(),
                _ => self.operations(rt, name),
            };
        }
    }
}

/// Whether `request` asks for authorized operations (a body that does not decode: no).
fn asks(request: &Request) -> bool {
    let v = request.api_version;
    match request.spec.key {
        apis::METADATA => decode_body::<MetadataRequest>(request).is_ok_and(|r| {
            v >= 8
                && (r.include_topic_authorized_operations
                    || (v <= 10 && r.include_cluster_authorized_operations))
        }),
        apis::DESCRIBE_CLUSTER => decode_body::<DescribeClusterRequest>(request)
            .is_ok_and(|r| r.include_cluster_authorized_operations),
        apis::DESCRIBE_GROUPS => decode_body::<DescribeGroupsRequest>(request)
            .is_ok_and(|r| v >= 3 && r.include_authorized_operations),
        apis::CONSUMER_GROUP_DESCRIBE => decode_body::<ConsumerGroupDescribeRequest>(request)
            .is_ok_and(|r| r.include_authorized_operations),
        apis::SHARE_GROUP_DESCRIBE => decode_body::<ShareGroupDescribeRequest>(request)
            .is_ok_and(|r| r.include_authorized_operations),
        _ => false,
    }
}

/// Narrows every filled operations field of an answer to `request` (see the module's table).
pub(super) fn edit(request: &Request, who: &Principal, frame: &bytes::Bytes) -> Outcome {
    fn each<R: Decodable + Encodable>(
        request: &Request,
        frame: &bytes::Bytes,
        edit: impl FnOnce(&mut R),
    ) -> Outcome {
        match response_body::<R>(request, frame) {
            Some(mut r) => {
                edit(&mut r);
                respond(request, &r)
            }
            None => Outcome::Close("cannot rewrite an answer's authorized operations".into()),
        }
    }
    use ResourceType::{Cluster, Group, Topic};
    match request.spec.key {
        apis::METADATA => each(request, frame, |r: &mut MetadataResponse| {
            for t in &mut r.topics {
                let name = t.name.as_ref().map_or("", |n| n.as_str()).to_string();
                who.narrow(&mut t.topic_authorized_operations, Topic, &name);
            }
            who.narrow(&mut r.cluster_authorized_operations, Cluster, CLUSTER_NAME);
        }),
        apis::DESCRIBE_CLUSTER => each(request, frame, |r: &mut DescribeClusterResponse| {
            who.narrow(&mut r.cluster_authorized_operations, Cluster, CLUSTER_NAME)
        }),
        apis::DESCRIBE_GROUPS => each(request, frame, |r: &mut DescribeGroupsResponse| {
            for g in &mut r.groups {
                who.narrow(&mut g.authorized_operations, Group, &g.group_id);
            }
        }),
        apis::CONSUMER_GROUP_DESCRIBE => {
            each(request, frame, |r: &mut ConsumerGroupDescribeResponse| {
                for g in &mut r.groups {
                    who.narrow(&mut g.authorized_operations, Group, &g.group_id);
                }
            })
        }
        apis::SHARE_GROUP_DESCRIBE => each(request, frame, |r: &mut ShareGroupDescribeResponse| {
            for g in &mut r.groups {
                who.narrow(&mut g.authorized_operations, Group, &g.group_id);
            }
        }),
        key => unreachable!("API {key} has no authorized operations"),
    }
}

/// `gate` with the answer's operations narrowed to `who`'s, when `request` asks for them.
pub(super) fn narrow(request: &Request, who: Principal, gate: Gate) -> Gate {
    if !asks(request) {
        return gate;
    }
    let outer = request.clone();
    let fill = move |outcome: Outcome| match outcome {
        Outcome::Respond(frame) => edit(&outer, &who, &frame),
        other => other,
    };
    match gate {
        Gate::Pass => Gate::Filtered(request.clone(), Box::new(fill)),
        Gate::Filtered(inner, merge) => {
            let merge: Merge = Box::new(move |outcome| fill(merge(outcome)));
            Gate::Filtered(inner, merge)
        }
        answered @ Gate::Answer(_) => answered,
    }
}
