//! Routes a parsed request to its handler family.
//!
//! The match is on the API key from `protocol::apis::SUPPORTED_APIS`; the codec has already
//! refused keys and versions outside that table, so the fallback arm is unreachable for a
//! consistent table and closes the connection rather than panic. New API keys (the project's
//! own 1000–1005) add a table entry, a guard schema or hand-written codec, and an arm here.

use super::authorize::{self, Gate};
use super::{
    acl_api, admin, api_versions, cluster_admin, configs, consumer_group_api, delete_admin, fetch,
    group_admin, group_api, metadata, produce, producer_txn_api, producer_txn_offset_api,
    producer_txn_share_api, scram_api, share_admin, share_api, share_txn_api, Bus, ConnInfo,
    Outcome,
};
use crate::protocol::apis;
use crate::protocol::codec::Request;

/// Handles one request: authorizes it (`authorize::gate`: unchanged, refused, or run without
/// its refused parts and merged), then routes it.
pub async fn dispatch<B: Bus>(bus: &B, conn: &ConnInfo, request: &Request) -> Outcome {
    match authorize::gate(bus, conn, request) {
        Gate::Pass => route(bus, conn, request).await,
        Gate::Answer(outcome) => outcome,
        // The merge decodes the answer again: it gets it in one buffer.
        Gate::Filtered(allowed, merge) => merge(route(bus, conn, &allowed).await.flattened()),
    }
}

async fn route<B: Bus>(bus: &B, conn: &ConnInfo, request: &Request) -> Outcome {
    match request.spec.key {
        apis::API_VERSIONS => api_versions::handle(request),
        apis::METADATA => metadata::handle_metadata(bus, conn, request).await,
        apis::FIND_COORDINATOR => metadata::handle_find_coordinator(conn, request),
        apis::OFFSET_COMMIT => group_api::handle_offset_commit(bus, request).await,
        apis::OFFSET_FETCH => group_api::handle_offset_fetch(bus, request).await,
        apis::JOIN_GROUP => group_api::handle_join_group(bus, conn, request).await,
        apis::SYNC_GROUP => group_api::handle_sync_group(bus, request).await,
        apis::HEARTBEAT => group_api::handle_heartbeat(bus, request).await,
        apis::LEAVE_GROUP => group_api::handle_leave_group(bus, request).await,
        apis::DESCRIBE_GROUPS => group_admin::handle_describe_groups(bus, request).await,
        apis::OFFSET_DELETE => group_admin::handle_offset_delete(bus, request).await,
        apis::TXN_OFFSET_COMMIT => {
            producer_txn_offset_api::handle_txn_offset_commit(bus, request).await
        }
        apis::PRODUCE => produce::handle_produce(bus, request).await,
        apis::FETCH => fetch::handle_fetch(bus, request).await,
        apis::LIST_OFFSETS => fetch::handle_list_offsets(bus, request).await,
        apis::CREATE_TOPICS => admin::handle_create_topics(bus, request).await,
        apis::DELETE_TOPICS => admin::handle_delete_topics(bus, request).await,
        apis::CREATE_PARTITIONS => admin::handle_create_partitions(bus, request).await,
        apis::DELETE_RECORDS => delete_admin::handle_delete_records(bus, request).await,
        apis::DELETE_GROUPS => delete_admin::handle_delete_groups(bus, request).await,
        apis::INCREMENTAL_ALTER_CONFIGS => {
            admin::handle_incremental_alter_configs(bus, request).await
        }
        apis::INIT_PRODUCER_ID => admin::handle_init_producer_id(bus, request).await,
        apis::ADD_PARTITIONS_TO_TXN => producer_txn_api::handle_add_partitions(bus, request).await,
        apis::ADD_OFFSETS_TO_TXN => producer_txn_api::handle_add_offsets(bus, request).await,
        apis::END_TXN => producer_txn_api::handle_end_txn(bus, request).await,
        apis::DESCRIBE_TRANSACTIONS => producer_txn_api::handle_describe(bus, request).await,
        apis::LIST_TRANSACTIONS => producer_txn_api::handle_list(bus, request).await,
        apis::OFFSET_FOR_LEADER_EPOCH => {
            cluster_admin::handle_offset_for_leader_epoch(bus, request).await
        }
        apis::DESCRIBE_CLUSTER => cluster_admin::handle_describe_cluster(bus, conn, request),
        apis::DESCRIBE_PRODUCERS => cluster_admin::handle_describe_producers(bus, request).await,
        apis::CONSUMER_GROUP_HEARTBEAT => {
            consumer_group_api::handle_heartbeat(bus, conn, request).await
        }
        apis::CONSUMER_GROUP_DESCRIBE => consumer_group_api::handle_describe(bus, request).await,
        apis::CREATE_ACLS => acl_api::handle_create_acls(bus, conn, request).await,
        apis::DESCRIBE_ACLS => acl_api::handle_describe_acls(bus, conn, request).await,
        apis::DELETE_ACLS => acl_api::handle_delete_acls(bus, conn, request).await,
        apis::DESCRIBE_CONFIGS => configs::handle_describe_configs(bus, request).await,
        apis::LIST_GROUPS => share_admin::handle_list_groups(bus, request).await,
        apis::SHARE_GROUP_DESCRIBE => share_admin::handle_share_group_describe(bus, request).await,
        apis::DESCRIBE_SHARE_GROUP_OFFSETS => {
            share_admin::handle_describe_share_group_offsets(bus, request).await
        }
        apis::ALTER_SHARE_GROUP_OFFSETS => {
            share_admin::handle_alter_share_group_offsets(bus, request).await
        }
        apis::DELETE_SHARE_GROUP_OFFSETS => {
            share_admin::handle_delete_share_group_offsets(bus, request).await
        }
        apis::SHARE_GROUP_HEARTBEAT => share_api::handle_heartbeat(bus, conn, request).await,
        apis::SHARE_FETCH => share_api::handle_share_fetch(bus, conn, request).await,
        apis::SHARE_ACKNOWLEDGE => share_api::handle_share_acknowledge(bus, conn, request).await,
        apis::TXN_SHARE_ACKNOWLEDGE => producer_txn_share_api::handle(bus, request).await,
        apis::SHARE_BEGIN_TRANSACTION => share_txn_api::handle_begin(bus, request).await,
        apis::SHARE_ACKNOWLEDGE_TRANSACTIONAL => {
            share_txn_api::handle_acknowledge(bus, request).await
        }
        apis::SHARE_PREPARE_TRANSACTION
        | apis::SHARE_COMMIT_TRANSACTION
        | apis::SHARE_ABORT_TRANSACTION => share_txn_api::handle_outcome(bus, request).await,
        apis::SHARE_LIST_TRANSACTIONS => share_txn_api::handle_list(bus, request).await,
        apis::SASL_HANDSHAKE => scram_api::handle_sasl_handshake_late(request),
        apis::SASL_AUTHENTICATE => scram_api::handle_sasl_authenticate_late(request),
        apis::DESCRIBE_CLIENT_QUOTAS => scram_api::handle_describe_client_quotas(request),
        apis::DESCRIBE_USER_SCRAM_CREDENTIALS => scram_api::handle_describe(bus, request),
        apis::ALTER_USER_SCRAM_CREDENTIALS => scram_api::handle_alter(bus, request),
        other => Outcome::Close(format!(
            "API key {other} is in the served table but has no handler"
        )),
    }
}
