//! The rest of the table of `authorize`: consumer- and share-group APIs, the share-transaction
//! keys 1000–1005, topic and config administration.
//!
//! Keys 1000–1005 are operations on their share group: ShareBeginTransaction,
//! ShareAcknowledgeTransactional, SharePrepareTransaction, ShareCommitTransaction and
//! ShareAbortTransaction need GROUP READ (the group's consumers and its coordinator are the ones
//! that read it), ShareListTransactions needs GROUP DESCRIBE; ShareAcknowledgeTransactional also
//! needs TOPIC READ on each topic it acknowledges (TOPIC_AUTHORIZATION_FAILED per partition).

use super::{
    answer, decoded, filtered, group_error, split, Ctx, Gate, CLUSTER_DENIED, GROUP_DENIED,
    TOPIC_DENIED,
};
use crate::protocol::apis;
use crate::protocol::codec::Request;
use crate::protocol::generated as gen;
use crate::security::authz::{Operation, ResourceType};
use crate::server::admin::{RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC};
use kafka_protocol::messages::*;

pub(super) fn decide(ctx: &Ctx<'_>, request: &Request) -> Result<Gate, ()> {
    use Operation::*;
    Ok(match request.spec.key {
        apis::SHARE_GROUP_HEARTBEAT => {
            let r: ShareGroupHeartbeatRequest = decoded(request)?;
            if !ctx.group(Read, &r.group_id) {
                return Ok(answer(request, |resp: &mut ShareGroupHeartbeatResponse| {
                    resp.error_code = GROUP_DENIED
                }));
            }
            let denied: Vec<String> = r
                .subscribed_topic_names
                .iter()
                .flatten()
                .filter(|t| !ctx.topic(Describe, t))
                .map(|t| t.to_string())
                .collect();
            if denied.is_empty() {
                Gate::Pass
            } else {
                answer(request, |resp: &mut ShareGroupHeartbeatResponse| {
                    resp.error_code = TOPIC_DENIED;
                    resp.error_message = Some(kafka_protocol::protocol::StrBytes::from_string(
                        format!("Not authorized to describe topics: {denied:?}"),
                    ));
                })
            }
        }
        apis::CONSUMER_GROUP_HEARTBEAT => {
            let r: ConsumerGroupHeartbeatRequest = decoded(request)?;
            if !ctx.group(Read, &r.group_id) {
                return Ok(answer(
                    request,
                    |resp: &mut ConsumerGroupHeartbeatResponse| resp.error_code = GROUP_DENIED,
                ));
            }
            let denied = r
                .subscribed_topic_names
                .iter()
                .flatten()
                .any(|t| !ctx.topic(Describe, t));
            if denied {
                answer(request, |resp: &mut ConsumerGroupHeartbeatResponse| {
                    resp.error_code = TOPIC_DENIED
                })
            } else {
                Gate::Pass
            }
        }
        apis::SHARE_FETCH => {
            let mut r: gen::ShareFetchRequest = decoded(request)?;
            let group = r.group_id.clone().unwrap_or_default();
            if !ctx.group(Read, &group) {
                return Ok(answer(request, |resp: &mut gen::ShareFetchResponse| {
                    resp.error_code = GROUP_DENIED
                }));
            }
            let ok = |t: &gen::share_fetch_request::FetchTopic| ctx.topic_id(Read, &t.topic_id);
            if r.topics.iter().all(ok) {
                return Ok(Gate::Pass);
            }
            let (kept, denied) = split(std::mem::take(&mut r.topics), ok);
            r.topics = kept;
            let denied: Vec<gen::share_fetch_response::ShareFetchableTopicResponse> = denied
                .iter()
                .map(|t| {
                    let mut out = gen::share_fetch_response::ShareFetchableTopicResponse::default();
                    out.topic_id = t.topic_id;
                    out.partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut d = gen::share_fetch_response::PartitionData::default();
                            d.partition_index = p.partition_index;
                            d.error_code = TOPIC_DENIED;
                            if !p.acknowledgement_batches.is_empty() {
                                d.acknowledge_error_code = TOPIC_DENIED;
                            }
                            d
                        })
                        .collect();
                    out
                })
                .collect();
            // The session (epoch) must still advance: run the handler even when no topic is
            // left (an empty ShareFetch is a valid session request).
            filtered(request, &r, 1, move |resp: &mut gen::ShareFetchResponse| {
                resp.responses.extend(denied)
            })?
        }
        apis::SHARE_ACKNOWLEDGE => {
            let mut r: gen::ShareAcknowledgeRequest = decoded(request)?;
            let group = r.group_id.clone().unwrap_or_default();
            if !ctx.group(Read, &group) {
                return Ok(answer(
                    request,
                    |resp: &mut gen::ShareAcknowledgeResponse| resp.error_code = GROUP_DENIED,
                ));
            }
            let ok = |t: &gen::share_acknowledge_request::AcknowledgeTopic| {
                ctx.topic_id(Read, &t.topic_id)
            };
            if r.topics.iter().all(ok) {
                return Ok(Gate::Pass);
            }
            let (kept, denied) = split(std::mem::take(&mut r.topics), ok);
            r.topics = kept;
            let denied: Vec<gen::share_acknowledge_response::ShareAcknowledgeTopicResponse> =
                denied
                    .iter()
                    .map(|t| {
                        let mut out =
                            gen::share_acknowledge_response::ShareAcknowledgeTopicResponse::default(
                            );
                        out.topic_id = t.topic_id;
                        out.partitions = t
                            .partitions
                            .iter()
                            .map(|p| {
                                let mut d =
                                    gen::share_acknowledge_response::PartitionData::default();
                                d.partition_index = p.partition_index;
                                d.error_code = TOPIC_DENIED;
                                d
                            })
                            .collect();
                        out
                    })
                    .collect();
            filtered(
                request,
                &r,
                1,
                move |resp: &mut gen::ShareAcknowledgeResponse| resp.responses.extend(denied),
            )?
        }
        apis::SHARE_BEGIN_TRANSACTION => {
            let r: gen::ShareBeginTransactionRequest = decoded(request)?;
            group_error::<gen::ShareBeginTransactionResponse>(
                ctx,
                request,
                &r.group_id,
                Read,
                |resp| resp.error_code = GROUP_DENIED,
            )
        }
        apis::SHARE_PREPARE_TRANSACTION => {
            let r: gen::SharePrepareTransactionRequest = decoded(request)?;
            group_error::<gen::SharePrepareTransactionResponse>(
                ctx,
                request,
                &r.group_id,
                Read,
                |resp| resp.error_code = GROUP_DENIED,
            )
        }
        apis::SHARE_COMMIT_TRANSACTION => {
            let r: gen::ShareCommitTransactionRequest = decoded(request)?;
            group_error::<gen::ShareCommitTransactionResponse>(
                ctx,
                request,
                &r.group_id,
                Read,
                |resp| resp.error_code = GROUP_DENIED,
            )
        }
        apis::SHARE_ABORT_TRANSACTION => {
            let r: gen::ShareAbortTransactionRequest = decoded(request)?;
            group_error::<gen::ShareAbortTransactionResponse>(
                ctx,
                request,
                &r.group_id,
                Read,
                |resp| resp.error_code = GROUP_DENIED,
            )
        }
        apis::SHARE_LIST_TRANSACTIONS => {
            let r: gen::ShareListTransactionsRequest = decoded(request)?;
            group_error::<gen::ShareListTransactionsResponse>(
                ctx,
                request,
                &r.group_id,
                Describe,
                |resp| resp.error_code = GROUP_DENIED,
            )
        }
        apis::SHARE_ACKNOWLEDGE_TRANSACTIONAL => {
            let mut r: gen::ShareAcknowledgeTransactionalRequest = decoded(request)?;
            if !ctx.group(Read, &r.group_id) {
                return Ok(answer(
                    request,
                    |resp: &mut gen::ShareAcknowledgeTransactionalResponse| {
                        resp.error_code = GROUP_DENIED
                    },
                ));
            }
            let ok = |t: &gen::share_acknowledge_transactional_request::AcknowledgeTopic| {
                ctx.topic_id(Read, &t.topic_id)
            };
            if r.topics.iter().all(ok) {
                return Ok(Gate::Pass);
            }
            let (kept, denied) = split(std::mem::take(&mut r.topics), ok);
            r.topics = kept;
            use gen::share_acknowledge_transactional_response as tr;
            let denied: Vec<tr::ShareAcknowledgeTransactionalTopicResponse> = denied
                .iter()
                .map(|t| {
                    let mut out = tr::ShareAcknowledgeTransactionalTopicResponse::default();
                    out.topic_id = t.topic_id;
                    out.partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut d = tr::PartitionData::default();
                            d.partition_index = p.partition_index;
                            d.error_code = TOPIC_DENIED;
                            d
                        })
                        .collect();
                    out
                })
                .collect();
            let remaining = r.topics.len();
            filtered(
                request,
                &r,
                remaining,
                move |resp: &mut gen::ShareAcknowledgeTransactionalResponse| {
                    resp.responses.extend(denied)
                },
            )?
        }
        apis::SHARE_GROUP_DESCRIBE => {
            let mut r: ShareGroupDescribeRequest = decoded(request)?;
            let ok = |g: &GroupId| ctx.group(Describe, g);
            if r.group_ids.iter().all(ok) {
                return Ok(Gate::Pass);
            }
            let (kept, denied) = split(std::mem::take(&mut r.group_ids), ok);
            r.group_ids = kept;
            let denied: Vec<share_group_describe_response::DescribedGroup> = denied
                .into_iter()
                .map(|g| {
                    let mut d = share_group_describe_response::DescribedGroup::default();
                    d.group_id = g;
                    d.error_code = GROUP_DENIED;
                    d.authorized_operations = i32::MIN;
                    d
                })
                .collect();
            let remaining = r.group_ids.len();
            filtered(
                request,
                &r,
                remaining,
                move |resp: &mut ShareGroupDescribeResponse| resp.groups.extend(denied),
            )?
        }
        apis::CONSUMER_GROUP_DESCRIBE => {
            let mut r: ConsumerGroupDescribeRequest = decoded(request)?;
            let ok = |g: &GroupId| ctx.group(Describe, g);
            if r.group_ids.iter().all(ok) {
                return Ok(Gate::Pass);
            }
            let (kept, denied) = split(std::mem::take(&mut r.group_ids), ok);
            r.group_ids = kept;
            let denied: Vec<consumer_group_describe_response::DescribedGroup> = denied
                .into_iter()
                .map(|g| {
                    let mut d = consumer_group_describe_response::DescribedGroup::default();
                    d.group_id = g;
                    d.error_code = GROUP_DENIED;
                    d.authorized_operations = i32::MIN;
                    d
                })
                .collect();
            let remaining = r.group_ids.len();
            filtered(
                request,
                &r,
                remaining,
                move |resp: &mut ConsumerGroupDescribeResponse| resp.groups.extend(denied),
            )?
        }
        apis::DESCRIBE_GROUPS => {
            let mut r: DescribeGroupsRequest = decoded(request)?;
            let ok = |g: &GroupId| ctx.group(Describe, g);
            if r.groups.iter().all(ok) {
                return Ok(Gate::Pass);
            }
            let (kept, denied) = split(std::mem::take(&mut r.groups), ok);
            r.groups = kept;
            let denied: Vec<describe_groups_response::DescribedGroup> = denied
                .into_iter()
                .map(|g| {
                    let mut d = describe_groups_response::DescribedGroup::default();
                    d.group_id = g;
                    d.error_code = GROUP_DENIED;
                    d.authorized_operations = i32::MIN;
                    d
                })
                .collect();
            let remaining = r.groups.len();
            filtered(
                request,
                &r,
                remaining,
                move |resp: &mut DescribeGroupsResponse| resp.groups.extend(denied),
            )?
        }
        apis::LIST_GROUPS => {
            // CLUSTER DESCRIBE lists every group; else only those the principal may describe.
            if ctx.cluster(Describe) {
                return Ok(Gate::Pass);
            }
            super::hide(ctx, request, |authz, who, resp: &mut ListGroupsResponse| {
                resp.groups
                    .retain(|g| authz.authorize(who, Describe, ResourceType::Group, &g.group_id))
            })
        }
        apis::DELETE_GROUPS => {
            let mut r: gen::DeleteGroupsRequest = decoded(request)?;
            let ok = |g: &String| ctx.group(Delete, g);
            if r.groups_names.iter().all(ok) {
                return Ok(Gate::Pass);
            }
            let (kept, denied) = split(std::mem::take(&mut r.groups_names), ok);
            r.groups_names = kept;
            let denied: Vec<gen::delete_groups_response::DeletableGroupResult> = denied
                .into_iter()
                .map(|g| {
                    let mut d = gen::delete_groups_response::DeletableGroupResult::default();
                    d.group_id = g;
                    d.error_code = GROUP_DENIED;
                    d
                })
                .collect();
            let remaining = r.groups_names.len();
            filtered(
                request,
                &r,
                remaining,
                move |resp: &mut gen::DeleteGroupsResponse| resp.results.extend(denied),
            )?
        }
        apis::OFFSET_DELETE => {
            let mut r: OffsetDeleteRequest = decoded(request)?;
            if !ctx.group(Delete, &r.group_id) {
                return Ok(answer(request, |resp: &mut OffsetDeleteResponse| {
                    resp.error_code = GROUP_DENIED
                }));
            }
            let ok = |t: &offset_delete_request::OffsetDeleteRequestTopic| ctx.topic(Read, &t.name);
            if r.topics.iter().all(ok) {
                return Ok(Gate::Pass);
            }
            let (kept, denied) = split(std::mem::take(&mut r.topics), ok);
            r.topics = kept;
            let denied: Vec<offset_delete_response::OffsetDeleteResponseTopic> = denied
                .iter()
                .map(|t| {
                    let mut out = offset_delete_response::OffsetDeleteResponseTopic::default();
                    out.name = t.name.clone();
                    out.partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut d =
                                offset_delete_response::OffsetDeleteResponsePartition::default();
                            d.partition_index = p.partition_index;
                            d.error_code = TOPIC_DENIED;
                            d
                        })
                        .collect();
                    out
                })
                .collect();
            let remaining = r.topics.len();
            filtered(
                request,
                &r,
                remaining,
                move |resp: &mut OffsetDeleteResponse| resp.topics.extend(denied),
            )?
        }
        apis::DESCRIBE_SHARE_GROUP_OFFSETS => {
            let r: gen::DescribeShareGroupOffsetsRequest = decoded(request)?;
            let denied_groups: Vec<String> = r
                .groups
                .iter()
                .filter(|g| !ctx.group(Describe, &g.group_id))
                .map(|g| g.group_id.clone())
                .collect();
            let denied_topics: Vec<String> = r
                .groups
                .iter()
                .flat_map(|g| g.topics.iter().flatten())
                .filter(|t| !ctx.topic(Describe, &t.topic_name))
                .map(|t| t.topic_name.clone())
                .collect();
            if denied_groups.is_empty() && denied_topics.is_empty() {
                return Ok(Gate::Pass);
            }
            let outer = request.clone();
            Gate::Filtered(
                request.clone(),
                Box::new(move |outcome| match outcome {
                    super::Outcome::Respond(frame) => {
                        match super::response_body::<gen::DescribeShareGroupOffsetsResponse>(
                            &outer, &frame,
                        ) {
                            Some(mut resp) => {
                                for g in &mut resp.groups {
                                    if denied_groups.contains(&g.group_id) {
                                        g.error_code = GROUP_DENIED;
                                        g.topics.clear();
                                        continue;
                                    }
                                    for t in &mut g.topics {
                                        if denied_topics.contains(&t.topic_name) {
                                            for p in &mut t.partitions {
                                                p.error_code = TOPIC_DENIED;
                                                p.start_offset = -1;
                                                p.lag = -1;
                                            }
                                        }
                                    }
                                }
                                super::respond(&outer, &resp)
                            }
                            None => super::Outcome::Close(
                                "cannot rewrite a filtered response".to_string(),
                            ),
                        }
                    }
                    other => other,
                }),
            )
        }
        apis::ALTER_SHARE_GROUP_OFFSETS => {
            let mut r: AlterShareGroupOffsetsRequest = decoded(request)?;
            if !ctx.group(Read, &r.group_id) {
                return Ok(answer(
                    request,
                    |resp: &mut AlterShareGroupOffsetsResponse| resp.error_code = GROUP_DENIED,
                ));
            }
            let ok = |t: &alter_share_group_offsets_request::AlterShareGroupOffsetsRequestTopic| {
                ctx.topic(Read, &t.topic_name)
            };
            if r.topics.iter().all(ok) {
                return Ok(Gate::Pass);
            }
            let (kept, denied) = split(std::mem::take(&mut r.topics), ok);
            r.topics = kept;
            use alter_share_group_offsets_response as ar;
            let denied: Vec<ar::AlterShareGroupOffsetsResponseTopic> = denied
                .iter()
                .map(|t| {
                    let mut out = ar::AlterShareGroupOffsetsResponseTopic::default();
                    out.topic_name = t.topic_name.clone();
                    out.partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut d = ar::AlterShareGroupOffsetsResponsePartition::default();
                            d.partition_index = p.partition_index;
                            d.error_code = TOPIC_DENIED;
                            d
                        })
                        .collect();
                    out
                })
                .collect();
            let remaining = r.topics.len();
            filtered(
                request,
                &r,
                remaining,
                move |resp: &mut AlterShareGroupOffsetsResponse| resp.responses.extend(denied),
            )?
        }
        apis::DELETE_SHARE_GROUP_OFFSETS => {
            let mut r: DeleteShareGroupOffsetsRequest = decoded(request)?;
            if !ctx.group(Delete, &r.group_id) {
                return Ok(answer(
                    request,
                    |resp: &mut DeleteShareGroupOffsetsResponse| resp.error_code = GROUP_DENIED,
                ));
            }
            let ok =
                |t: &delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic| {
                    ctx.topic(Read, &t.topic_name)
                };
            if r.topics.iter().all(ok) {
                return Ok(Gate::Pass);
            }
            let (kept, denied) = split(std::mem::take(&mut r.topics), ok);
            r.topics = kept;
            let denied: Vec<delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic> =
                denied
                    .iter()
                    .map(|t| {
                        let mut out = delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic::default();
                        out.topic_name = t.topic_name.clone();
                        out.error_code = TOPIC_DENIED;
                        out
                    })
                    .collect();
            let remaining = r.topics.len();
            filtered(
                request,
                &r,
                remaining,
                move |resp: &mut DeleteShareGroupOffsetsResponse| resp.responses.extend(denied),
            )?
        }
        apis::CREATE_TOPICS => {
            let mut r: CreateTopicsRequest = decoded(request)?;
            if ctx.cluster(Create) {
                return Ok(Gate::Pass);
            }
            let ok = |t: &create_topics_request::CreatableTopic| ctx.topic(Create, &t.name);
            if r.topics.iter().all(ok) {
                return Ok(Gate::Pass);
            }
            let (kept, denied) = split(std::mem::take(&mut r.topics), ok);
            r.topics = kept;
            let denied: Vec<create_topics_response::CreatableTopicResult> = denied
                .iter()
                .map(|t| {
                    let mut out = create_topics_response::CreatableTopicResult::default();
                    out.name = t.name.clone();
                    out.error_code = TOPIC_DENIED;
                    out.num_partitions = -1;
                    out.replication_factor = -1;
                    out
                })
                .collect();
            let remaining = r.topics.len();
            filtered(
                request,
                &r,
                remaining,
                move |resp: &mut CreateTopicsResponse| resp.topics.extend(denied),
            )?
        }
        apis::DELETE_TOPICS => {
            let mut r: DeleteTopicsRequest = decoded(request)?;
            let v = request.api_version;
            if v < 6 {
                let ok = |t: &TopicName| ctx.topic(Delete, t);
                if r.topic_names.iter().all(ok) {
                    return Ok(Gate::Pass);
                }
                let (kept, denied) = split(std::mem::take(&mut r.topic_names), ok);
                r.topic_names = kept;
                let denied: Vec<delete_topics_response::DeletableTopicResult> = denied
                    .into_iter()
                    .map(|t| {
                        let mut out = delete_topics_response::DeletableTopicResult::default();
                        out.name = Some(t);
                        out.error_code = TOPIC_DENIED;
                        out
                    })
                    .collect();
                let remaining = r.topic_names.len();
                return filtered(
                    request,
                    &r,
                    remaining,
                    move |resp: &mut DeleteTopicsResponse| resp.responses.extend(denied),
                );
            }
            let ok = |t: &delete_topics_request::DeleteTopicState| match &t.name {
                Some(n) => ctx.topic(Delete, n),
                None => ctx.topic_id(Delete, &t.topic_id),
            };
            if r.topics.iter().all(ok) {
                return Ok(Gate::Pass);
            }
            let (kept, denied) = split(std::mem::take(&mut r.topics), ok);
            r.topics = kept;
            let denied: Vec<delete_topics_response::DeletableTopicResult> = denied
                .into_iter()
                .map(|t| {
                    let mut out = delete_topics_response::DeletableTopicResult::default();
                    out.name = t.name;
                    out.topic_id = t.topic_id;
                    out.error_code = TOPIC_DENIED;
                    out
                })
                .collect();
            let remaining = r.topics.len();
            filtered(
                request,
                &r,
                remaining,
                move |resp: &mut DeleteTopicsResponse| resp.responses.extend(denied),
            )?
        }
        apis::CREATE_PARTITIONS => {
            let mut r: CreatePartitionsRequest = decoded(request)?;
            let ok =
                |t: &create_partitions_request::CreatePartitionsTopic| ctx.topic(Alter, &t.name);
            if r.topics.iter().all(ok) {
                return Ok(Gate::Pass);
            }
            let (kept, denied) = split(std::mem::take(&mut r.topics), ok);
            r.topics = kept;
            let denied: Vec<create_partitions_response::CreatePartitionsTopicResult> = denied
                .iter()
                .map(|t| {
                    let mut out =
                        create_partitions_response::CreatePartitionsTopicResult::default();
                    out.name = t.name.clone();
                    out.error_code = TOPIC_DENIED;
                    out
                })
                .collect();
            let remaining = r.topics.len();
            filtered(
                request,
                &r,
                remaining,
                move |resp: &mut CreatePartitionsResponse| resp.results.extend(denied),
            )?
        }
        apis::DELETE_RECORDS => {
            let mut r: DeleteRecordsRequest = decoded(request)?;
            let ok = |t: &delete_records_request::DeleteRecordsTopic| ctx.topic(Delete, &t.name);
            if r.topics.iter().all(ok) {
                return Ok(Gate::Pass);
            }
            let (kept, denied) = split(std::mem::take(&mut r.topics), ok);
            r.topics = kept;
            let denied: Vec<delete_records_response::DeleteRecordsTopicResult> = denied
                .iter()
                .map(|t| {
                    let mut out = delete_records_response::DeleteRecordsTopicResult::default();
                    out.name = t.name.clone();
                    out.partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut d =
                                delete_records_response::DeleteRecordsPartitionResult::default();
                            d.partition_index = p.partition_index;
                            d.low_watermark = -1;
                            d.error_code = TOPIC_DENIED;
                            d
                        })
                        .collect();
                    out
                })
                .collect();
            let remaining = r.topics.len();
            filtered(
                request,
                &r,
                remaining,
                move |resp: &mut DeleteRecordsResponse| resp.topics.extend(denied),
            )?
        }
        apis::OFFSET_FOR_LEADER_EPOCH => {
            let mut r: OffsetForLeaderEpochRequest = decoded(request)?;
            let ok = |t: &offset_for_leader_epoch_request::OffsetForLeaderTopic| {
                ctx.topic(Describe, &t.topic)
            };
            if r.topics.iter().all(ok) {
                return Ok(Gate::Pass);
            }
            let (kept, denied) = split(std::mem::take(&mut r.topics), ok);
            r.topics = kept;
            use offset_for_leader_epoch_response as or;
            let denied: Vec<or::OffsetForLeaderTopicResult> = denied
                .iter()
                .map(|t| {
                    let mut out = or::OffsetForLeaderTopicResult::default();
                    out.topic = t.topic.clone();
                    out.partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut d = or::EpochEndOffset::default();
                            d.partition = p.partition;
                            d.error_code = TOPIC_DENIED;
                            d.leader_epoch = -1;
                            d.end_offset = -1;
                            d
                        })
                        .collect();
                    out
                })
                .collect();
            let remaining = r.topics.len();
            filtered(
                request,
                &r,
                remaining,
                move |resp: &mut OffsetForLeaderEpochResponse| resp.topics.extend(denied),
            )?
        }
        apis::DESCRIBE_PRODUCERS => {
            let mut r: DescribeProducersRequest = decoded(request)?;
            let ok = |t: &describe_producers_request::TopicRequest| ctx.topic(Read, &t.name);
            if r.topics.iter().all(ok) {
                return Ok(Gate::Pass);
            }
            let (kept, denied) = split(std::mem::take(&mut r.topics), ok);
            r.topics = kept;
            use describe_producers_response as dr;
            let denied: Vec<dr::TopicResponse> = denied
                .iter()
                .map(|t| {
                    let mut out = dr::TopicResponse::default();
                    out.name = t.name.clone();
                    out.partitions = t
                        .partition_indexes
                        .iter()
                        .map(|p| {
                            let mut d = dr::PartitionResponse::default();
                            d.partition_index = *p;
                            d.error_code = TOPIC_DENIED;
                            d
                        })
                        .collect();
                    out
                })
                .collect();
            let remaining = r.topics.len();
            filtered(
                request,
                &r,
                remaining,
                move |resp: &mut DescribeProducersResponse| resp.topics.extend(denied),
            )?
        }
        apis::DESCRIBE_CONFIGS => {
            let mut r: DescribeConfigsRequest = decoded(request)?;
            let ok = |res: &describe_configs_request::DescribeConfigsResource| {
                config_allowed(ctx, res.resource_type, &res.resource_name, DescribeConfigs)
                    .is_none()
            };
            if r.resources.iter().all(ok) {
                return Ok(Gate::Pass);
            }
            let (kept, denied) = split(std::mem::take(&mut r.resources), ok);
            r.resources = kept;
            let denied: Vec<describe_configs_response::DescribeConfigsResult> = denied
                .iter()
                .map(|res| {
                    let mut out = describe_configs_response::DescribeConfigsResult::default();
                    out.resource_type = res.resource_type;
                    out.resource_name = res.resource_name.clone();
                    out.error_code =
                        config_allowed(ctx, res.resource_type, &res.resource_name, DescribeConfigs)
                            .unwrap_or(CLUSTER_DENIED);
                    out
                })
                .collect();
            let remaining = r.resources.len();
            filtered(
                request,
                &r,
                remaining,
                move |resp: &mut DescribeConfigsResponse| resp.results.extend(denied),
            )?
        }
        apis::INCREMENTAL_ALTER_CONFIGS => {
            let mut r: IncrementalAlterConfigsRequest = decoded(request)?;
            let ok = |res: &incremental_alter_configs_request::AlterConfigsResource| {
                config_allowed(ctx, res.resource_type, &res.resource_name, AlterConfigs).is_none()
            };
            if r.resources.iter().all(ok) {
                return Ok(Gate::Pass);
            }
            let (kept, denied) = split(std::mem::take(&mut r.resources), ok);
            r.resources = kept;
            let denied: Vec<incremental_alter_configs_response::AlterConfigsResourceResponse> =
                denied
                    .iter()
                    .map(|res| {
                        let mut out =
                            incremental_alter_configs_response::AlterConfigsResourceResponse::default();
                        out.resource_type = res.resource_type;
                        out.resource_name = res.resource_name.clone();
                        out.error_code =
                            config_allowed(ctx, res.resource_type, &res.resource_name, AlterConfigs)
                                .unwrap_or(CLUSTER_DENIED);
                        out
                    })
                    .collect();
            let remaining = r.resources.len();
            filtered(
                request,
                &r,
                remaining,
                move |resp: &mut IncrementalAlterConfigsResponse| resp.responses.extend(denied),
            )?
        }
        // Producer transactions and SCRAM credentials; every other served API needs no
        // authorization (ApiVersions, DescribeCluster, the SASL exchange).
        _ => super::txn::decide(ctx, request)?.unwrap_or(Gate::Pass),
    })
}

/// `None` when `op` on the config resource is allowed, else the error code Kafka answers.
fn config_allowed(ctx: &Ctx<'_>, resource_type: i8, name: &str, op: Operation) -> Option<i16> {
    match resource_type {
        RESOURCE_TOPIC => (!ctx.topic(op, name)).then_some(TOPIC_DENIED),
        RESOURCE_GROUP => (!ctx.group(op, name)).then_some(GROUP_DENIED),
        RESOURCE_BROKER => (!ctx.cluster(op)).then_some(CLUSTER_DENIED),
        _ => None, // unknown types: the handler answers INVALID_REQUEST
    }
}
