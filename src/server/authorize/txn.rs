//! The table of `authorize` for producer transactions, TxnShareAcknowledge and the SCRAM
//! credential APIs (Kafka's KafkaApis checks):
//!
//! - AddPartitionsToTxn v0–3: TRANSACTIONAL_ID WRITE (else every partition
//!   TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and TOPIC WRITE per topic (refused topics
//!   TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED); v4+ (the broker-to-broker
//!   batch) CLUSTER CLUSTER_ACTION.
//! - AddOffsetsToTxn: TRANSACTIONAL_ID WRITE, then GROUP READ. EndTxn: TRANSACTIONAL_ID WRITE.
//! - TxnOffsetCommit: TRANSACTIONAL_ID WRITE and GROUP READ (else every partition gets the
//!   error), TOPIC READ per topic.
//! - DescribeTransactions: TRANSACTIONAL_ID DESCRIBE per id; ListTransactions: only the ids the
//!   principal may describe are listed.
//! - TxnShareAcknowledge (key 93): TRANSACTIONAL_ID WRITE, GROUP READ, TOPIC READ (whole request).
//! - AlterUserScramCredentials: CLUSTER ALTER; DescribeUserScramCredentials: CLUSTER DESCRIBE;
//!   DescribeClientQuotas: CLUSTER DESCRIBE_CONFIGS.

use super::{answer, decoded, filtered, sb, split, Ctx, Gate, CLUSTER_DENIED, GROUP_DENIED};
use super::{TOPIC_DENIED, TXN_ID_DENIED};
use crate::protocol::apis;
use crate::protocol::codec::Request;
use crate::security::authz::{Operation, ResourceType};
use kafka_protocol::messages::*;

/// OPERATION_NOT_ATTEMPTED: the partitions left out because others were refused.
const NOT_ATTEMPTED: i16 = 55;

/// `None`: the request is not one of this table's.
pub(super) fn decide(ctx: &Ctx<'_>, request: &Request) -> Result<Option<Gate>, ()> {
    use Operation::*;
    let txn_ok = |id: &str| ctx.allowed(Write, ResourceType::TransactionalId, id);
    Ok(Some(match request.spec.key {
        apis::ADD_PARTITIONS_TO_TXN if request.api_version >= 4 => {
            if ctx.cluster(ClusterAction) {
                Gate::Pass
            } else {
                answer(request, |resp: &mut AddPartitionsToTxnResponse| {
                    resp.error_code = CLUSTER_DENIED
                })
            }
        }
        apis::ADD_PARTITIONS_TO_TXN => {
            let r: AddPartitionsToTxnRequest = decoded(request)?;
            let txn_allowed = txn_ok(&r.v3_and_below_transactional_id);
            let topic_ok = |t: &add_partitions_to_txn_request::AddPartitionsToTxnTopic| {
                ctx.topic(Write, &t.name)
            };
            if txn_allowed && r.v3_and_below_topics.iter().all(topic_ok) {
                return Ok(Some(Gate::Pass));
            }
            answer(request, |resp: &mut AddPartitionsToTxnResponse| {
                use add_partitions_to_txn_response as pr;
                resp.results_by_topic_v3_and_below = r
                    .v3_and_below_topics
                    .iter()
                    .map(|t| {
                        let code = match (txn_allowed, topic_ok(t)) {
                            (false, _) => TXN_ID_DENIED,
                            (true, false) => TOPIC_DENIED,
                            (true, true) => NOT_ATTEMPTED,
                        };
                        let mut out = pr::AddPartitionsToTxnTopicResult::default();
                        out.name = t.name.clone();
                        out.results_by_partition = t
                            .partitions
                            .iter()
                            .map(|p| {
                                let mut x = pr::AddPartitionsToTxnPartitionResult::default();
                                x.partition_index = *p;
                                x.partition_error_code = code;
                                x
                            })
                            .collect();
                        out
                    })
                    .collect();
            })
        }
        apis::ADD_OFFSETS_TO_TXN => {
            let r: AddOffsetsToTxnRequest = decoded(request)?;
            let code = if !txn_ok(&r.transactional_id) {
                TXN_ID_DENIED
            } else if !ctx.group(Read, &r.group_id) {
                GROUP_DENIED
            } else {
                return Ok(Some(Gate::Pass));
            };
            answer(request, |resp: &mut AddOffsetsToTxnResponse| {
                resp.error_code = code
            })
        }
        apis::END_TXN => {
            let r: EndTxnRequest = decoded(request)?;
            if txn_ok(&r.transactional_id) {
                Gate::Pass
            } else {
                answer(request, |resp: &mut EndTxnResponse| {
                    resp.error_code = TXN_ID_DENIED;
                    resp.producer_id = (-1).into();
                    resp.producer_epoch = -1;
                })
            }
        }
        apis::TXN_OFFSET_COMMIT => {
            let mut r: TxnOffsetCommitRequest = decoded(request)?;
            let whole = if !txn_ok(&r.transactional_id) {
                Some(TXN_ID_DENIED)
            } else if !ctx.group(Read, &r.group_id) {
                Some(GROUP_DENIED)
            } else {
                None
            };
            let topic_ok = |t: &txn_offset_commit_request::TxnOffsetCommitRequestTopic| {
                ctx.topic(Read, &t.name)
            };
            if whole.is_none() && r.topics.iter().all(topic_ok) {
                return Ok(Some(Gate::Pass));
            }
            let refused = |t: &txn_offset_commit_request::TxnOffsetCommitRequestTopic, code| {
                let mut out = txn_offset_commit_response::TxnOffsetCommitResponseTopic::default();
                out.name = t.name.clone();
                out.partitions = t
                    .partitions
                    .iter()
                    .map(|p| {
                        let mut x =
                            txn_offset_commit_response::TxnOffsetCommitResponsePartition::default();
                        x.partition_index = p.partition_index;
                        x.error_code = code;
                        x
                    })
                    .collect();
                out
            };
            if let Some(code) = whole {
                let topics: Vec<_> = r.topics.iter().map(|t| refused(t, code)).collect();
                answer(request, move |resp: &mut TxnOffsetCommitResponse| {
                    resp.topics = topics
                })
            } else {
                let (kept, denied) = split(std::mem::take(&mut r.topics), topic_ok);
                r.topics = kept;
                let denied: Vec<_> = denied.iter().map(|t| refused(t, TOPIC_DENIED)).collect();
                let remaining = r.topics.len();
                filtered(
                    request,
                    &r,
                    remaining,
                    move |resp: &mut TxnOffsetCommitResponse| resp.topics.extend(denied),
                )?
            }
        }
        apis::DESCRIBE_TRANSACTIONS => {
            let mut r: DescribeTransactionsRequest = decoded(request)?;
            let ok =
                |id: &TransactionalId| ctx.allowed(Describe, ResourceType::TransactionalId, id);
            if r.transactional_ids.iter().all(ok) {
                return Ok(Some(Gate::Pass));
            }
            let (kept, denied) = split(std::mem::take(&mut r.transactional_ids), ok);
            r.transactional_ids = kept;
            let denied: Vec<_> = denied
                .into_iter()
                .map(|id| {
                    let mut s = describe_transactions_response::TransactionState::default();
                    s.transactional_id = id;
                    s.error_code = TXN_ID_DENIED;
                    s.transaction_state = sb("");
                    s.producer_id = (-1).into();
                    s.producer_epoch = -1;
                    s
                })
                .collect();
            let remaining = r.transactional_ids.len();
            filtered(
                request,
                &r,
                remaining,
                move |resp: &mut DescribeTransactionsResponse| {
                    resp.transaction_states.extend(denied)
                },
            )?
        }
        apis::LIST_TRANSACTIONS => super::hide(
            ctx,
            request,
            |authz, who, resp: &mut ListTransactionsResponse| {
                resp.transaction_states.retain(|t| {
                    authz.authorize(
                        who,
                        Describe,
                        ResourceType::TransactionalId,
                        &t.transactional_id,
                    )
                })
            },
        ),
        apis::TXN_SHARE_ACKNOWLEDGE => {
            let r: crate::protocol::producer_txn_share::TxnShareAcknowledgeRequest =
                decoded(request)?;
            let txn_allowed = r.transactional_id.as_deref().map_or(true, |id| txn_ok(id));
            let code = if !txn_allowed {
                TXN_ID_DENIED
            } else if !ctx.group(Read, &r.group_id) {
                GROUP_DENIED
            } else if !r.topics.iter().all(|t| ctx.topic_id(Read, &t.topic_id)) {
                TOPIC_DENIED
            } else {
                return Ok(Some(Gate::Pass));
            };
            answer(
                request,
                |resp: &mut crate::protocol::producer_txn_share::TxnShareAcknowledgeResponse| {
                    resp.error_code = code
                },
            )
        }
        apis::ALTER_USER_SCRAM_CREDENTIALS => {
            let r: AlterUserScramCredentialsRequest = decoded(request)?;
            if ctx.cluster(Alter) {
                return Ok(Some(Gate::Pass));
            }
            let mut users: Vec<String> = r
                .deletions
                .iter()
                .map(|d| d.name.to_string())
                .chain(r.upsertions.iter().map(|u| u.name.to_string()))
                .collect();
            users.sort();
            users.dedup();
            answer(request, |resp: &mut AlterUserScramCredentialsResponse| {
                resp.results = users
                    .iter()
                    .map(|u| {
                        let mut x =
                            alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default();
                        x.user = sb(u);
                        x.error_code = CLUSTER_DENIED;
                        x
                    })
                    .collect()
            })
        }
        apis::DESCRIBE_USER_SCRAM_CREDENTIALS => {
            if ctx.cluster(Describe) {
                Gate::Pass
            } else {
                answer(
                    request,
                    |resp: &mut DescribeUserScramCredentialsResponse| {
                        resp.error_code = CLUSTER_DENIED
                    },
                )
            }
        }
        apis::DESCRIBE_CLIENT_QUOTAS => {
            if ctx.cluster(DescribeConfigs) {
                Gate::Pass
            } else {
                answer(request, |resp: &mut DescribeClientQuotasResponse| {
                    resp.error_code = CLUSTER_DENIED
                })
            }
        }
        _ => return Ok(None),
    }))
}
