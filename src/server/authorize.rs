//! Authorization of every request, before its handler runs (one hook, in `dispatch`).
//!
//! With an authorizer configured (`ConnInfo::authorizer`), [`gate`] decides per request, from
//! the connection's principal and client IP and the registry's ACLs (`crate::security::authz`), what
//! Kafka's `KafkaApis` decides for that API:
//! - [`Gate::Pass`]: everything the request names is allowed; the handler runs unchanged.
//! - [`Gate::Answer`]: the request is refused as a whole (its group, its transactional id, the
//!   cluster): the answer carries Kafka's error in the API's own response and the handler never
//!   runs.
//! - [`Gate::Filtered`]: some topics (or groups) are refused. The handler runs on the request
//!   without them (re-encoded), and [`Merge`] adds the refused ones to its response with
//!   TOPIC_AUTHORIZATION_FAILED (or GROUP_AUTHORIZATION_FAILED) per item, or, where Kafka hides
//!   them (Metadata of all topics, ListGroups), removes what the principal may not see. If
//!   nothing is left, the handler does not run and the answer holds the refused items only.
//!
//! Which API needs what (Kafka's "Operations and Resources on Protocols"; the project's keys
//! 1000–1005 as operations on their group) is the table in [`gate`]. Handlers stay unaware of
//! authorization: where a request asks for authorized operations (KIP-430), handlers report all
//! of them and `operations` narrows the answer to the principal's.

use super::{respond, Bus, ConnInfo, Outcome};
use crate::protocol::apis;
use crate::protocol::codec::{decode_body, Request};
use crate::security::authz::{Authorizer, AuthorizerConfig, Operation, Requester, ResourceType};
use crate::shard::registry::TopicRegistry;
use bytes::{Buf, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use uuid::Uuid;

/// Kafka's name of the one CLUSTER resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";

const TOPIC_DENIED: i16 = 29; // TOPIC_AUTHORIZATION_FAILED
const GROUP_DENIED: i16 = 30; // GROUP_AUTHORIZATION_FAILED
const CLUSTER_DENIED: i16 = 31; // CLUSTER_AUTHORIZATION_FAILED
const TXN_ID_DENIED: i16 = 53; // TRANSACTIONAL_ID_AUTHORIZATION_FAILED

/// Rewrites the handler's answer to a filtered request.
pub type Merge = Box<dyn FnOnce(Outcome) -> Outcome>;

/// What the hook decided for one request.
pub enum Gate {
    Pass,
    Answer(Outcome),
    Filtered(Request, Merge),
}

/// The decision context of one request.
struct Ctx<'a> {
    authz: Authorizer<'a>,
    who: Requester<'a>,
    registry: &'a TopicRegistry,
}

impl Ctx<'_> {
    fn allowed(&self, op: Operation, rt: ResourceType, name: &str) -> bool {
        self.authz.authorize(self.who, op, rt, name)
    }
    fn topic(&self, op: Operation, name: &str) -> bool {
        self.allowed(op, ResourceType::Topic, name)
    }
    fn group(&self, op: Operation, name: &str) -> bool {
        self.allowed(op, ResourceType::Group, name)
    }
    fn cluster(&self, op: Operation) -> bool {
        self.allowed(op, ResourceType::Cluster, CLUSTER_NAME)
    }
    /// A topic named by id: allowed when the id is unknown (the handler answers
    /// UNKNOWN_TOPIC_ID, as Kafka does before authorizing).
    fn topic_id(&self, op: Operation, id: &Uuid) -> bool {
        match self.registry.topic_by_id(id) {
            Some(t) => self.topic(op, &t.name),
            None => true,
        }
    }
}

/// Decides `request` for the connection's principal; `Pass` when no authorizer is configured.
pub fn gate<B: Bus>(bus: &B, conn: &ConnInfo, request: &Request) -> Gate {
    let Some(config_arc) = conn.authorizer.clone() else {
        return Gate::Pass;
    };
    let config = &*config_arc;
    let registry = bus.registry();
    let principal = conn.principal.borrow().clone();
    let host = conn.peer_addr.ip().to_canonical().to_string();
    let ctx = Ctx {
        authz: Authorizer {
            config,
            acls: &registry.acls,
        },
        who: Requester {
            principal: &principal,
            host: &host,
        },
        registry: &registry,
    };
    match decide(&ctx, request) {
        Ok(gate) => operations::narrow(
            request,
            operations::Principal {
                config: config_arc.clone(),
                registry: registry.clone(),
                principal,
                host,
            },
            gate,
        ),
        // A body that does not decode is the handler's to refuse (it closes the connection).
        Err(()) => Gate::Pass,
    }
}

/// Whether a configured authorizer lets `conn` do `op` on `name` (for handlers that need a
/// decision of their own; true without an authorizer).
pub fn is_allowed(
    config: Option<&AuthorizerConfig>,
    registry: &TopicRegistry,
    conn: &ConnInfo,
    op: Operation,
    rt: ResourceType,
    name: &str,
) -> bool {
    let Some(config) = config else { return true };
    let principal = conn.principal.borrow().clone();
    let host = conn.peer_addr.ip().to_canonical().to_string();
    Authorizer {
        config,
        acls: &registry.acls,
    }
    .authorize(
        Requester {
            principal: &principal,
            host: &host,
        },
        op,
        rt,
        name,
    )
}

fn decoded<T: Decodable>(request: &Request) -> Result<T, ()> {
    decode_body(request).map_err(|_| ())
}

/// `request` with `body` as its body.
fn with_body<T: Encodable>(request: &Request, body: &T) -> Result<Request, ()> {
    let mut buf = BytesMut::new();
    body.encode(&mut buf, request.api_version).map_err(|_| ())?;
    Ok(Request {
        body: buf.freeze(),
        ..request.clone()
    })
}

/// Decodes the body of a response frame that `respond` made for `request`.
fn response_body<R: Decodable>(request: &Request, frame: &bytes::Bytes) -> Option<R> {
    let mut buf = frame.clone();
    if buf.remaining() < 8 {
        return None;
    }
    buf.advance(4); // size
    let header_version = request.spec.response_header_version(request.api_version);
    kafka_protocol::messages::ResponseHeader::decode(&mut buf, header_version).ok()?;
    R::decode(&mut buf, request.api_version).ok()
}

/// A whole-request refusal: `R`'s default with `set` applied.
fn answer<R: Encodable + Default>(request: &Request, set: impl FnOnce(&mut R)) -> Gate {
    let mut r = R::default();
    set(&mut r);
    Gate::Answer(respond(request, &r))
}

/// The request without its refused parts (`filtered`), and `add` to put them into `R`.
/// `remaining == 0`: nothing is left to run; answer with the refused parts only.
fn filtered<T: Encodable, R: Decodable + Encodable + Default + 'static>(
    request: &Request,
    filtered: &T,
    remaining: usize,
    add: impl FnOnce(&mut R) + 'static,
) -> Result<Gate, ()> {
    if remaining == 0 {
        return Ok(answer(request, add));
    }
    Ok(rewrite(with_body(request, filtered)?, request, add))
}

/// Runs `inner` in place of `request` and applies `edit` to the handler's answer (decoded as
/// `R`, the answer to `request`) before it is sent.
fn rewrite<R: Decodable + Encodable + 'static>(
    inner: Request,
    request: &Request,
    edit: impl FnOnce(&mut R) + 'static,
) -> Gate {
    let outer = request.clone();
    Gate::Filtered(
        inner,
        Box::new(move |outcome| match outcome {
            Outcome::Respond(frame) => match response_body::<R>(&outer, &frame) {
                Some(mut r) => {
                    edit(&mut r);
                    respond(&outer, &r)
                }
                None => Outcome::Close("cannot rewrite a filtered response".to_string()),
            },
            other => other,
        }),
    )
}

/// Runs `request` whole and lets `keep` drop from the answer what the principal may not see
/// (Kafka hides, rather than refuses, what a principal may not describe).
fn hide<R: Decodable + Encodable + 'static>(
    ctx: &Ctx<'_>,
    request: &Request,
    keep: impl FnOnce(&Authorizer<'_>, Requester<'_>, &mut R) + 'static,
) -> Gate {
    let config = ctx.authz.config.clone();
    let acls = ctx.authz.acls.clone();
    let principal = ctx.who.principal.to_string();
    let host = ctx.who.host.to_string();
    rewrite(request.clone(), request, move |resp: &mut R| {
        let authz = Authorizer {
            config: &config,
            acls: &acls,
        };
        let who = Requester {
            principal: &principal,
            host: &host,
        };
        keep(&authz, who, resp)
    })
}

fn sb(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// Splits `items` into (allowed, refused) by `ok`.
fn split<T>(items: Vec<T>, ok: impl Fn(&T) -> bool) -> (Vec<T>, Vec<T>) {
    items.into_iter().partition(|i| ok(i))
}

/// The table: which API needs which operation on which resource.
fn decide(ctx: &Ctx<'_>, request: &Request) -> Result<Gate, ()> {
    use Operation::*;
    let v = request.api_version;
    Ok(match request.spec.key {
        apis::API_VERSIONS | apis::DESCRIBE_CLUSTER => Gate::Pass,
        apis::PRODUCE => {
            let mut r: ProduceRequest = decoded(request)?;
            if let Some(txn) = &r.transactional_id {
                if !ctx.allowed(Write, ResourceType::TransactionalId, txn) {
                    return Ok(refuse_produce(request, &r, TXN_ID_DENIED));
                }
            }
            let ok = |t: &produce_request::TopicProduceData| {
                if v >= 13 {
                    ctx.topic_id(Write, &t.topic_id)
                } else {
                    ctx.topic(Write, &t.name)
                }
            };
            if r.topic_data.iter().all(ok) {
                return Ok(Gate::Pass);
            }
            let (kept, denied) = split(std::mem::take(&mut r.topic_data), ok);
            r.topic_data = kept;
            let denied: Vec<produce_response::TopicProduceResponse> = denied
                .iter()
                .map(|t| produce_topic_error(t, TOPIC_DENIED))
                .collect();
            if r.acks == 0 && r.topic_data.is_empty() {
                return Ok(Gate::Answer(Outcome::NoResponse));
            }
            filtered(
                request,
                &r,
                r.topic_data.len(),
                move |resp: &mut ProduceResponse| resp.responses.extend(denied),
            )?
        }
        apis::FETCH => {
            let mut r: FetchRequest = decoded(request)?;
            let ok = |t: &fetch_request::FetchTopic| {
                if v >= 13 {
                    ctx.topic_id(Read, &t.topic_id)
                } else {
                    ctx.topic(Read, &t.topic)
                }
            };
            if r.topics.iter().all(ok) {
                return Ok(Gate::Pass);
            }
            let (kept, denied) = split(std::mem::take(&mut r.topics), ok);
            r.topics = kept;
            let denied: Vec<fetch_response::FetchableTopicResponse> = denied
                .iter()
                .map(|t| {
                    let mut out = fetch_response::FetchableTopicResponse::default();
                    out.topic = t.topic.clone();
                    out.topic_id = t.topic_id;
                    out.partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut d = fetch_response::PartitionData::default();
                            d.partition_index = p.partition;
                            d.error_code = TOPIC_DENIED;
                            d.high_watermark = -1;
                            d.last_stable_offset = -1;
                            d.log_start_offset = -1;
                            d.records = Some(Default::default());
                            d
                        })
                        .collect();
                    out
                })
                .collect();
            filtered(
                request,
                &r,
                r.topics.len(),
                move |resp: &mut FetchResponse| resp.responses.extend(denied),
            )?
        }
        apis::LIST_OFFSETS => {
            let mut r: ListOffsetsRequest = decoded(request)?;
            let ok = |t: &list_offsets_request::ListOffsetsTopic| ctx.topic(Describe, &t.name);
            if r.topics.iter().all(ok) {
                return Ok(Gate::Pass);
            }
            let (kept, denied) = split(std::mem::take(&mut r.topics), ok);
            r.topics = kept;
            let denied: Vec<list_offsets_response::ListOffsetsTopicResponse> = denied
                .iter()
                .map(|t| {
                    let mut out = list_offsets_response::ListOffsetsTopicResponse::default();
                    out.name = t.name.clone();
                    out.partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut d =
                                list_offsets_response::ListOffsetsPartitionResponse::default();
                            d.partition_index = p.partition_index;
                            d.error_code = TOPIC_DENIED;
                            d.timestamp = -1;
                            d.offset = -1;
                            d
                        })
                        .collect();
                    out
                })
                .collect();
            filtered(
                request,
                &r,
                r.topics.len(),
                move |resp: &mut ListOffsetsResponse| resp.topics.extend(denied),
            )?
        }
        apis::METADATA => metadata(ctx, request)?,
        apis::FIND_COORDINATOR => {
            let r: FindCoordinatorRequest = decoded(request)?;
            let (rt, code) = match r.key_type {
                0 => (ResourceType::Group, GROUP_DENIED),
                1 => (ResourceType::TransactionalId, TXN_ID_DENIED),
                _ => return Ok(Gate::Pass), // share-state coordinator keys: no check here
            };
            let keys: Vec<StrBytes> = if v >= 4 {
                r.coordinator_keys.clone()
            } else {
                vec![r.key.clone()]
            };
            if keys.iter().all(|k| ctx.allowed(Describe, rt, k)) {
                return Ok(Gate::Pass);
            }
            if v < 4 {
                return Ok(answer(request, |resp: &mut FindCoordinatorResponse| {
                    resp.error_code = code;
                    resp.node_id = (-1).into();
                    resp.host = sb("");
                    resp.port = -1;
                }));
            }
            let (kept, denied) = split(keys, |k| ctx.allowed(Describe, rt, k));
            let mut r = r;
            r.coordinator_keys = kept;
            let denied: Vec<find_coordinator_response::Coordinator> = denied
                .into_iter()
                .map(|k| {
                    let mut c = find_coordinator_response::Coordinator::default();
                    c.key = k;
                    c.node_id = (-1).into();
                    c.host = sb("");
                    c.port = -1;
                    c.error_code = code;
                    c
                })
                .collect();
            filtered(
                request,
                &r,
                r.coordinator_keys.len(),
                move |resp: &mut FindCoordinatorResponse| resp.coordinators.extend(denied),
            )?
        }
        apis::JOIN_GROUP => {
            let r: JoinGroupRequest = decoded(request)?;
            if ctx.group(Read, &r.group_id) {
                Gate::Pass
            } else {
                answer(request, |resp: &mut JoinGroupResponse| {
                    resp.error_code = GROUP_DENIED;
                    resp.generation_id = -1;
                })
            }
        }
        apis::SYNC_GROUP => {
            let r: SyncGroupRequest = decoded(request)?;
            group_error::<SyncGroupResponse>(ctx, request, &r.group_id, Read, |resp| {
                resp.error_code = GROUP_DENIED
            })
        }
        apis::HEARTBEAT => {
            let r: HeartbeatRequest = decoded(request)?;
            group_error::<HeartbeatResponse>(ctx, request, &r.group_id, Read, |resp| {
                resp.error_code = GROUP_DENIED
            })
        }
        apis::LEAVE_GROUP => {
            let r: LeaveGroupRequest = decoded(request)?;
            group_error::<LeaveGroupResponse>(ctx, request, &r.group_id, Read, |resp| {
                resp.error_code = GROUP_DENIED
            })
        }
        apis::OFFSET_COMMIT => {
            let mut r: OffsetCommitRequest = decoded(request)?;
            let group_ok = ctx.group(Read, &r.group_id);
            let ok = |t: &offset_commit_request::OffsetCommitRequestTopic| {
                group_ok && ctx.topic(Read, &t.name)
            };
            if r.topics.iter().all(ok) {
                return Ok(Gate::Pass);
            }
            let code = if group_ok { TOPIC_DENIED } else { GROUP_DENIED };
            let (kept, denied) = split(std::mem::take(&mut r.topics), ok);
            r.topics = kept;
            let denied: Vec<offset_commit_response::OffsetCommitResponseTopic> = denied
                .iter()
                .map(|t| {
                    let mut out = offset_commit_response::OffsetCommitResponseTopic::default();
                    out.name = t.name.clone();
                    out.topic_id = t.topic_id;
                    out.partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut d =
                                offset_commit_response::OffsetCommitResponsePartition::default();
                            d.partition_index = p.partition_index;
                            d.error_code = code;
                            d
                        })
                        .collect();
                    out
                })
                .collect();
            filtered(
                request,
                &r,
                r.topics.len(),
                move |resp: &mut OffsetCommitResponse| resp.topics.extend(denied),
            )?
        }
        apis::OFFSET_FETCH => offset_fetch(ctx, request)?,
        apis::INIT_PRODUCER_ID => {
            let r: InitProducerIdRequest = decoded(request)?;
            let (ok, code) = match &r.transactional_id {
                Some(txn) => (
                    ctx.allowed(Write, ResourceType::TransactionalId, txn),
                    TXN_ID_DENIED,
                ),
                None => (
                    ctx.cluster(IdempotentWrite)
                        || ctx.authz.authorize_any(ctx.who, Write, ResourceType::Topic),
                    CLUSTER_DENIED,
                ),
            };
            if ok {
                Gate::Pass
            } else {
                answer(request, |resp: &mut InitProducerIdResponse| {
                    resp.error_code = code;
                    resp.producer_id = (-1).into();
                    resp.producer_epoch = -1;
                })
            }
        }
        apis::CREATE_ACLS => {
            let r: CreateAclsRequest = decoded(request)?;
            if ctx.cluster(Alter) {
                Gate::Pass
            } else {
                answer(request, |resp: &mut CreateAclsResponse| {
                    resp.results = r
                        .creations
                        .iter()
                        .map(|_| {
                            let mut c = create_acls_response::AclCreationResult::default();
                            c.error_code = CLUSTER_DENIED;
                            c
                        })
                        .collect()
                })
            }
        }
        apis::DELETE_ACLS => {
            let r: DeleteAclsRequest = decoded(request)?;
            if ctx.cluster(Alter) {
                Gate::Pass
            } else {
                answer(request, |resp: &mut DeleteAclsResponse| {
                    resp.filter_results = r
                        .filters
                        .iter()
                        .map(|_| {
                            let mut c = delete_acls_response::DeleteAclsFilterResult::default();
                            c.error_code = CLUSTER_DENIED;
                            c
                        })
                        .collect()
                })
            }
        }
        apis::DESCRIBE_ACLS => {
            if ctx.cluster(Describe) {
                Gate::Pass
            } else {
                answer(request, |resp: &mut DescribeAclsResponse| {
                    resp.error_code = CLUSTER_DENIED
                })
            }
        }
        _ => more::decide(ctx, request)?,
    })
}

/// A whole-request GROUP check answered with `R` (`set` writes the error).
fn group_error<R: Encodable + Default>(
    ctx: &Ctx<'_>,
    request: &Request,
    group: &str,
    op: Operation,
    set: impl FnOnce(&mut R),
) -> Gate {
    if ctx.group(op, group) {
        Gate::Pass
    } else {
        answer(request, set)
    }
}

fn produce_topic_error(
    t: &produce_request::TopicProduceData,
    code: i16,
) -> produce_response::TopicProduceResponse {
    let mut out = produce_response::TopicProduceResponse::default();
    out.name = t.name.clone();
    out.topic_id = t.topic_id;
    out.partition_responses = t
        .partition_data
        .iter()
        .map(|p| {
            let mut d = produce_response::PartitionProduceResponse::default();
            d.index = p.index;
            d.error_code = code;
            d.base_offset = -1;
            d.log_append_time_ms = -1;
            d.log_start_offset = -1;
            d
        })
        .collect();
    out
}

/// Produce refused as a whole (transactional id): every partition gets `code`.
fn refuse_produce(request: &Request, r: &ProduceRequest, code: i16) -> Gate {
    if r.acks == 0 {
        return Gate::Answer(Outcome::NoResponse);
    }
    let topics: Vec<_> = r
        .topic_data
        .iter()
        .map(|t| produce_topic_error(t, code))
        .collect();
    answer(request, |resp: &mut ProduceResponse| {
        resp.responses = topics
    })
}

/// Metadata: TOPIC DESCRIBE per topic. Refused topics named in the request answer
/// TOPIC_AUTHORIZATION_FAILED (without their id when named by name, as Kafka hides whether they
/// exist); for "all topics" they are left out.
fn metadata(ctx: &Ctx<'_>, request: &Request) -> Result<Gate, ()> {
    use Operation::Describe;
    let mut r: MetadataRequest = decoded(request)?;
    let v = request.api_version;
    let all = match &r.topics {
        None => true,
        Some(t) => v == 0 && t.is_empty(),
    };
    if all {
        if ctx.registry.topics.keys().all(|t| ctx.topic(Describe, t)) {
            return Ok(Gate::Pass);
        }
        let hidden: Vec<String> = ctx
            .registry
            .topics
            .keys()
            .filter(|t| !ctx.topic(Describe, t))
            .cloned()
            .collect();
        let inner = request.clone();
        return Ok(Gate::Filtered(
            inner.clone(),
            Box::new(move |outcome| match outcome {
                Outcome::Respond(frame) => {
                    match response_body::<MetadataResponse>(&inner, &frame) {
                        Some(mut resp) => {
                            resp.topics.retain(|t| {
                                t.name.as_ref().is_none_or(|n| {
                                    !hidden.iter().any(|h| h.as_str() == n.as_str())
                                })
                            });
                            respond(&inner, &resp)
                        }
                        None => Outcome::Close("cannot rewrite a filtered response".to_string()),
                    }
                }
                other => other,
            }),
        ));
    }
    let name_of = |t: &metadata_request::MetadataRequestTopic| -> Option<String> {
        match &t.name {
            Some(n) => Some(n.to_string()),
            None => ctx
                .registry
                .topic_by_id(&t.topic_id)
                .map(|m| m.name.clone()),
        }
    };
    let ok = |t: &metadata_request::MetadataRequestTopic| {
        name_of(t).is_none_or(|n| ctx.topic(Describe, &n))
    };
    let topics = r.topics.take().unwrap_or_default();
    if topics.iter().all(ok) {
        return Ok(Gate::Pass);
    }
    let (kept, denied) = split(topics, ok);
    let denied: Vec<metadata_response::MetadataResponseTopic> = denied
        .iter()
        .map(|t| {
            let mut out = metadata_response::MetadataResponseTopic::default();
            out.error_code = TOPIC_DENIED;
            out.name = t.name.clone();
            out.topic_id = if t.name.is_none() {
                t.topic_id
            } else {
                Uuid::nil()
            };
            out.topic_authorized_operations = i32::MIN;
            out
        })
        .collect();
    let remaining = kept.len();
    r.topics = Some(kept);
    if remaining == 0 {
        // The handler still answers the brokers and the cluster id, with no topics.
        let inner = with_body(request, &r)?;
        let outer = request.clone();
        return Ok(Gate::Filtered(
            inner,
            Box::new(move |outcome| match outcome {
                Outcome::Respond(frame) => {
                    match response_body::<MetadataResponse>(&outer, &frame) {
                        Some(mut resp) => {
                            resp.topics = denied;
                            respond(&outer, &resp)
                        }
                        None => Outcome::Close("cannot rewrite a filtered response".to_string()),
                    }
                }
                other => other,
            }),
        ));
    }
    filtered(
        request,
        &r,
        remaining,
        move |resp: &mut MetadataResponse| resp.topics.extend(denied),
    )
}

/// OffsetFetch: GROUP DESCRIBE per group (GROUP_AUTHORIZATION_FAILED), TOPIC DESCRIBE per named
/// topic (TOPIC_AUTHORIZATION_FAILED per partition). Topics of an "all topics" fetch the
/// principal may not describe are left out.
fn offset_fetch(ctx: &Ctx<'_>, request: &Request) -> Result<Gate, ()> {
    use Operation::Describe;
    let r: OffsetFetchRequest = decoded(request)?;
    let v = request.api_version;
    if v < 8 {
        if !ctx.group(Describe, &r.group_id) {
            return Ok(answer(request, |resp: &mut OffsetFetchResponse| {
                if v >= 2 {
                    resp.error_code = GROUP_DENIED;
                } else {
                    // v1 has no top-level error: every requested partition carries it.
                    resp.topics = r
                        .topics
                        .iter()
                        .flatten()
                        .map(|t| {
                            let mut out = offset_fetch_response::OffsetFetchResponseTopic::default();
                            out.name = t.name.clone();
                            out.partitions = t
                                .partition_indexes
                                .iter()
                                .map(|p| {
                                    let mut d =
                                        offset_fetch_response::OffsetFetchResponsePartition::default();
                                    d.partition_index = *p;
                                    d.committed_offset = -1;
                                    d.error_code = GROUP_DENIED;
                                    d
                                })
                                .collect();
                            out
                        })
                        .collect();
                }
            }));
        }
        let hidden_all = r.topics.is_none();
        let denied: Vec<String> = match &r.topics {
            Some(ts) => ts
                .iter()
                .filter(|t| !ctx.topic(Describe, &t.name))
                .map(|t| t.name.to_string())
                .collect(),
            None => ctx
                .registry
                .topics
                .keys()
                .filter(|t| !ctx.topic(Describe, t))
                .cloned()
                .collect(),
        };
        if denied.is_empty() {
            return Ok(Gate::Pass);
        }
        let outer = request.clone();
        return Ok(Gate::Filtered(
            request.clone(),
            Box::new(move |outcome| match outcome {
                Outcome::Respond(frame) => {
                    match response_body::<OffsetFetchResponse>(&outer, &frame) {
                        Some(mut resp) => {
                            for t in &mut resp.topics {
                                if denied.iter().any(|d| d.as_str() == t.name.as_str()) {
                                    for p in &mut t.partitions {
                                        p.error_code = TOPIC_DENIED;
                                        p.committed_offset = -1;
                                        p.metadata = None;
                                    }
                                }
                            }
                            if hidden_all {
                                resp.topics.retain(|t| {
                                    !denied.iter().any(|d| d.as_str() == t.name.as_str())
                                });
                            }
                            respond(&outer, &resp)
                        }
                        None => Outcome::Close("cannot rewrite a filtered response".to_string()),
                    }
                }
                other => other,
            }),
        ));
    }
    // v8+: several groups.
    let group_denied: Vec<String> = r
        .groups
        .iter()
        .filter(|g| !ctx.group(Describe, &g.group_id))
        .map(|g| g.group_id.to_string())
        .collect();
    let topic_denied: Vec<(String, String)> = r
        .groups
        .iter()
        .flat_map(|g| {
            let names: Vec<String> = match &g.topics {
                Some(ts) => ts.iter().map(|t| t.name.to_string()).collect(),
                None => ctx.registry.topics.keys().cloned().collect(),
            };
            names
                .into_iter()
                .filter(|n| !ctx.topic(Describe, n))
                .map(|n| (g.group_id.to_string(), n))
                .collect::<Vec<_>>()
        })
        .collect();
    if group_denied.is_empty() && topic_denied.is_empty() {
        return Ok(Gate::Pass);
    }
    let all_topics: Vec<String> = r
        .groups
        .iter()
        .filter(|g| g.topics.is_none())
        .map(|g| g.group_id.to_string())
        .collect();
    let outer = request.clone();
    Ok(Gate::Filtered(
        request.clone(),
        Box::new(move |outcome| match outcome {
            Outcome::Respond(frame) => match response_body::<OffsetFetchResponse>(&outer, &frame) {
                Some(mut resp) => {
                    for g in &mut resp.groups {
                        let gid = g.group_id.to_string();
                        if group_denied.contains(&gid) {
                            g.error_code = GROUP_DENIED;
                            g.topics.clear();
                            continue;
                        }
                        let denied = |name: &str| {
                            topic_denied.iter().any(|(dg, dt)| *dg == gid && dt == name)
                        };
                        if all_topics.contains(&gid) {
                            g.topics.retain(|t| !denied(&t.name));
                        }
                        for t in &mut g.topics {
                            if denied(&t.name) {
                                for p in &mut t.partitions {
                                    p.error_code = TOPIC_DENIED;
                                    p.committed_offset = -1;
                                    p.metadata = None;
                                }
                            }
                        }
                    }
                    respond(&outer, &resp)
                }
                None => Outcome::Close("cannot rewrite a filtered response".to_string()),
            },
            other => other,
        }),
    ))
}

mod more;
mod operations;
mod txn;

#[cfg(test)]
mod tests;
