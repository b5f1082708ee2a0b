//! Metadata v0–13 (topic ids from v10) and FindCoordinator v0–6 (batched from v4): groups of
//! every type (key type 0) and transactional ids (1) are coordinated here; share-state keys (2) are
//! refused (see [`find_coordinator_response()`]).
//!
//! Answered from the local shard's registry snapshot: no other shard is asked. This broker is
//! node [`BROKER_NODE_ID`], the leader of every partition, the controller, and the coordinator
//! of every group; it advertises the address the client connected to.

use super::{respond, Bus, ConnInfo, Outcome};
use crate::constants::BROKER_NODE_ID;
use crate::protocol::codec::{decode_body, Request};
use crate::security::authz::ResourceType;
use crate::shard::registry::{validate_topic_name, TopicMeta, TopicRegistry};
use kafka_protocol::messages::{
    find_coordinator_response, metadata_response, FindCoordinatorRequest, FindCoordinatorResponse,
    MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

/// FindCoordinator key types: groups of every type (classic, consumer, share), transactional
/// ids, and share-partition state keys (`group:topicId:partition`, used between Kafka brokers).
pub const KEY_TYPE_GROUP: i8 = 0;
pub const KEY_TYPE_TRANSACTION: i8 = 1;
pub const KEY_TYPE_SHARE: i8 = 2;

/// Kafka's message for an INVALID_REQUEST.
const INVALID_REQUEST_MESSAGE: &str = "This most likely occurs because of a request being malformed by the client library or the message was sent to an incompatible broker. See the broker logs for more details.";

fn sb(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn host_of(conn: &ConnInfo) -> String {
    conn.local_addr.ip().to_string()
}

fn topic_entry(topic: &TopicMeta, version: i16) -> metadata_response::MetadataResponseTopic {
    let mut out = metadata_response::MetadataResponseTopic::default();
    out.error_code = 0;
    out.name = Some(TopicName(sb(&topic.name)));
    if version >= 10 {
        out.topic_id = topic.id;
    }
    out.partitions = (0..topic.partitions)
        .map(|index| {
            let mut p = metadata_response::MetadataResponsePartition::default();
            p.partition_index = index;
            p.leader_id = BROKER_NODE_ID.into();
            if version >= 7 {
                p.leader_epoch = 0;
            }
            p.replica_nodes = vec![BROKER_NODE_ID.into()];
            p.isr_nodes = vec![BROKER_NODE_ID.into()];
            p
        })
        .collect();
    out
}

fn missing_topic(
    name: Option<&str>,
    id: uuid::Uuid,
    code: i16,
    version: i16,
) -> metadata_response::MetadataResponseTopic {
    let mut out = metadata_response::MetadataResponseTopic::default();
    out.error_code = code;
    out.name = match name {
        Some(name) => Some(TopicName(sb(name))),
        None if version < 12 => Some(TopicName(sb(""))),
        None => None,
    };
    if version >= 10 {
        out.topic_id = id;
    }
    out
}

/// Builds the Metadata response (pure, for tests).
pub fn metadata_response(
    registry: &TopicRegistry,
    request: &MetadataRequest,
    version: i16,
    conn: &ConnInfo,
) -> MetadataResponse {
    let mut response = MetadataResponse::default();
    let mut broker = metadata_response::MetadataResponseBroker::default();
    broker.node_id = BROKER_NODE_ID.into();
    broker.host = sb(&host_of(conn));
    broker.port = i32::from(conn.local_addr.port());
    response.brokers = vec![broker];
    if version >= 2 {
        response.cluster_id = Some(sb(&registry.cluster_id));
    }
    if version >= 1 {
        response.controller_id = BROKER_NODE_ID.into();
    }
    let all = match &request.topics {
        None => true,
        Some(list) => version == 0 && list.is_empty(),
    };
    response.topics = if all {
        registry
            .topics
            .values()
            .map(|t| topic_entry(t, version))
            .collect()
    } else {
        let mut seen = std::collections::HashSet::new();
        request
            .topics
            .iter()
            .flatten()
            .filter(|wanted| seen.insert((wanted.name.clone(), wanted.topic_id)))
            .map(|wanted| {
                match wanted
                    .name
                    .as_ref()
                    .filter(|n| !n.is_empty() || wanted.topic_id.is_nil())
                {
                    Some(name) => match registry.topic(name) {
                        Some(topic) => topic_entry(topic, version),
                        None => {
                            let code = if validate_topic_name(name).is_err() {
                                ResponseError::InvalidTopicException.code()
                            } else {
                                ResponseError::UnknownTopicOrPartition.code()
                            };
                            missing_topic(Some(name), uuid::Uuid::nil(), code, version)
                        }
                    },
                    None => match registry.topic_by_id(&wanted.topic_id) {
                        Some(topic) => topic_entry(topic, version),
                        None => missing_topic(
                            None,
                            wanted.topic_id,
                            ResponseError::UnknownTopicId.code(),
                            version,
                        ),
                    },
                }
            })
            .collect()
    };
    // KIP-430, as Kafka: the topics answered by name or found by id carry their operations
    // (all of them here; with an authorizer `authorize` narrows them to the principal's), and
    // v8–10 the cluster's.
    if version >= 8 && request.include_topic_authorized_operations {
        let topic_ops = ResourceType::Topic.all_operations();
        for t in &mut response.topics {
            if t.error_code != ResponseError::UnknownTopicId.code() {
                t.topic_authorized_operations = topic_ops;
            }
        }
    }
    if (8..=10).contains(&version) && request.include_cluster_authorized_operations {
        response.cluster_authorized_operations = ResourceType::Cluster.all_operations();
    }
    response
}

/// Metadata v0–13. Auto topic creation is off: unknown topics are reported, never created.
pub async fn handle_metadata<B: Bus>(bus: &B, conn: &ConnInfo, request: &Request) -> Outcome {
    let decoded: MetadataRequest = match decode_body(request) {
        Ok(r) => r,
        Err(e) => return Outcome::Close(e.to_string()),
    };
    if let Err(refused) = super::check_count(
        "topics",
        decoded.topics.as_ref().map_or(0, Vec::len),
        crate::constants::REQUEST_ENTITIES_MAX,
    ) {
        return refused;
    }
    let response = metadata_response(&bus.registry(), &decoded, request.api_version, conn);
    respond(request, &response)
}

/// Builds the FindCoordinator response (pure, for tests).
pub fn find_coordinator_response(
    request: &FindCoordinatorRequest,
    version: i16,
    conn: &ConnInfo,
) -> FindCoordinatorResponse {
    let host = host_of(conn);
    let port = i32::from(conn.local_addr.port());
    // As Kafka 4.4 answers (measured): any group id, the empty one included, is coordinated
    // here; an unknown key type is INVALID_REQUEST with Kafka's message.
    let check = |_key: &str| -> Result<(), (i16, String)> {
        match request.key_type {
            // Groups and transactional ids: this broker coordinates every one (on the shard
            // the key hashes to, `model::group_shard`).
            KEY_TYPE_GROUP | KEY_TYPE_TRANSACTION => Ok(()),
            KEY_TYPE_SHARE => Err((
                ResponseError::InvalidRequest.code(),
                "share-partition state coordinators are not served (no broker-to-broker share state)"
                    .to_string(),
            )),
            _ => Err((
                ResponseError::InvalidRequest.code(),
                INVALID_REQUEST_MESSAGE.to_string(),
            )),
        }
    };
    let mut response = FindCoordinatorResponse::default();
    if version >= 4 {
        response.coordinators = request
            .coordinator_keys
            .iter()
            .map(|key| {
                let mut c = find_coordinator_response::Coordinator::default();
                c.key = key.clone();
                match check(key) {
                    Ok(()) => {
                        c.node_id = BROKER_NODE_ID.into();
                        c.host = sb(&host);
                        c.port = port;
                        // Kafka sends an empty message with NONE.
                        c.error_message = Some(sb(""));
                    }
                    Err((code, message)) => {
                        c.node_id = (-1).into();
                        c.port = -1;
                        c.error_code = code;
                        c.error_message = Some(sb(&message));
                    }
                }
                c
            })
            .collect();
    } else {
        match check(&request.key) {
            Ok(()) => {
                response.node_id = BROKER_NODE_ID.into();
                response.host = sb(&host);
                response.port = port;
                if version >= 1 {
                    // Kafka's v1–3 message with NONE.
                    response.error_message = Some(sb("NONE"));
                }
            }
            Err((code, message)) => {
                response.node_id = (-1).into();
                response.port = -1;
                response.error_code = code;
                if version >= 1 {
                    response.error_message = Some(sb(&message));
                }
            }
        }
    }
    response
}

/// FindCoordinator v0–6.
pub fn handle_find_coordinator(conn: &ConnInfo, request: &Request) -> Outcome {
    let decoded: FindCoordinatorRequest = match decode_body(request) {
        Ok(r) => r,
        Err(e) => return Outcome::Close(e.to_string()),
    };
    if let Err(refused) = super::check_count(
        "coordinator keys",
        decoded.coordinator_keys.len(),
        crate::constants::REQUEST_ENTITIES_MAX,
    ) {
        return refused;
    }
    let response = find_coordinator_response(&decoded, request.api_version, conn);
    respond(request, &response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::apis::{api_spec, FIND_COORDINATOR, METADATA};
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::protocol::{Decodable, Encodable};

    fn conn() -> ConnInfo {
        ConnInfo::new(
            "127.0.0.1:19092".parse().unwrap(),
            "127.0.0.1:50000".parse().unwrap(),
        )
    }

    fn registry() -> TopicRegistry {
        let mut r = TopicRegistry::new("cluster-x".into());
        r.create_topic("orders", uuid::Uuid::from_u128(11), 3, &[])
            .unwrap();
        r.create_topic("audit", uuid::Uuid::from_u128(12), 1, &[])
            .unwrap();
        r
    }

    fn round_trip(response: &MetadataResponse, version: i16) -> MetadataResponse {
        let mut buf = bytes::BytesMut::new();
        response.encode(&mut buf, version).unwrap();
        MetadataResponse::decode(&mut buf.freeze(), version).unwrap()
    }

    #[test]
    fn all_topics_encode_at_every_version() {
        let spec = api_spec(METADATA).unwrap();
        for version in spec.min_version..=spec.max_version {
            let mut request = MetadataRequest::default();
            request.topics = None; // all topics
            let response = round_trip(
                &metadata_response(&registry(), &request, version, &conn()),
                version,
            );
            assert_eq!(response.topics.len(), 2, "v{version}");
            let orders = response
                .topics
                .iter()
                .find(|t| t.name.as_deref().map(|n| n.as_str()) == Some("orders"))
                .unwrap();
            assert_eq!(orders.partitions.len(), 3);
            assert_eq!(response.brokers[0].port, 19092);
            if version >= 10 {
                assert_eq!(orders.topic_id, uuid::Uuid::from_u128(11));
            }
        }
    }

    #[test]
    fn named_ids_and_unknown_topics() {
        let mut by_name = MetadataRequestTopic::default();
        by_name.name = Some(TopicName(sb("orders")));
        let mut unknown = MetadataRequestTopic::default();
        unknown.name = Some(TopicName(sb("nope")));
        let mut invalid = MetadataRequestTopic::default();
        invalid.name = Some(TopicName(sb("bad name")));
        let mut by_id = MetadataRequestTopic::default();
        by_id.name = None;
        by_id.topic_id = uuid::Uuid::from_u128(12);
        let mut bad_id = MetadataRequestTopic::default();
        bad_id.name = None;
        bad_id.topic_id = uuid::Uuid::from_u128(99);
        let mut request = MetadataRequest::default();
        request.topics = Some(vec![by_name, unknown, invalid, by_id, bad_id]);
        let response = round_trip(&metadata_response(&registry(), &request, 13, &conn()), 13);
        let codes: Vec<i16> = response.topics.iter().map(|t| t.error_code).collect();
        assert_eq!(codes, vec![0, 3, 17, 0, 100]);
        assert_eq!(
            response.topics[3].name.as_deref().map(|n| n.as_str()),
            Some("audit")
        );
        // An empty list (v1+) asks for no topics.
        request.topics = Some(vec![]);
        assert!(metadata_response(&registry(), &request, 1, &conn())
            .topics
            .is_empty());
        // In v0 an empty list means all topics.
        assert_eq!(
            metadata_response(&registry(), &request, 0, &conn())
                .topics
                .len(),
            2
        );
    }

    #[test]
    fn authorized_operations_when_asked_for() {
        let mut by_name = MetadataRequestTopic::default();
        by_name.name = Some(TopicName(sb("orders")));
        let mut unknown = MetadataRequestTopic::default();
        unknown.name = Some(TopicName(sb("nope")));
        let mut bad_id = MetadataRequestTopic::default();
        bad_id.name = None;
        bad_id.topic_id = uuid::Uuid::from_u128(99);
        let mut request = MetadataRequest::default();
        request.topics = Some(vec![by_name, unknown, bad_id]);
        for version in [7, 8, 10, 11, 12] {
            for asked in [false, true] {
                request.include_topic_authorized_operations = asked;
                request.include_cluster_authorized_operations = asked;
                let response = round_trip(
                    &metadata_response(&registry(), &request, version, &conn()),
                    version,
                );
                let ops: Vec<i32> = response
                    .topics
                    .iter()
                    .map(|t| t.topic_authorized_operations)
                    .collect();
                let topic = if asked && version >= 8 {
                    0xdf8
                } else {
                    i32::MIN
                };
                assert_eq!(ops, vec![topic, topic, i32::MIN], "v{version} {asked}");
                let cluster = if asked && (8..=10).contains(&version) {
                    0x1fa0
                } else {
                    i32::MIN
                };
                assert_eq!(
                    response.cluster_authorized_operations, cluster,
                    "v{version} {asked}"
                );
            }
        }
    }

    #[test]
    fn repeated_topics_are_answered_once() {
        let mut t = MetadataRequestTopic::default();
        t.name = Some(TopicName(sb("orders")));
        let mut request = MetadataRequest::default();
        request.topics = Some(vec![t.clone(); 1000]);
        let response = metadata_response(&registry(), &request, 12, &conn());
        assert_eq!(response.topics.len(), 1);
    }

    #[test]
    fn find_coordinator_every_version() {
        let spec = api_spec(FIND_COORDINATOR).unwrap();
        for version in spec.min_version..=spec.max_version {
            let mut request = FindCoordinatorRequest::default();
            if version >= 4 {
                request.coordinator_keys = vec![sb("g1"), sb("")];
            } else {
                request.key = sb("g1");
            }
            let response = find_coordinator_response(&request, version, &conn());
            let mut buf = bytes::BytesMut::new();
            response.encode(&mut buf, version).unwrap();
            let back = FindCoordinatorResponse::decode(&mut buf.freeze(), version).unwrap();
            if version >= 4 {
                assert_eq!(back.coordinators.len(), 2);
                assert_eq!(back.coordinators[0].port, 19092);
                // An empty group id is coordinated too (as Kafka).
                assert_eq!(back.coordinators[1].error_code, 0);
            } else {
                assert_eq!(back.error_code, 0);
                assert_eq!(back.port, 19092);
                assert_eq!(back.host.as_str(), "127.0.0.1");
            }
        }
        let mut txn = FindCoordinatorRequest::default();
        txn.key = sb("t");
        txn.key_type = 1;
        let back = find_coordinator_response(&txn, 2, &conn());
        assert_eq!(
            (back.error_code, back.port),
            (0, 19092),
            "transactional ids are coordinated"
        );
        txn.key_type = 2;
        assert_eq!(find_coordinator_response(&txn, 2, &conn()).error_code, 42);
        txn.key_type = 5;
        assert_eq!(find_coordinator_response(&txn, 2, &conn()).error_code, 42);
    }
}
