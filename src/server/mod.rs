//! Connections and request dispatch; one handler file per API family.
//!
//! Everything here is synchronous state or runtime-agnostic `async` code: handlers are
//! `async fn`s generic over a [`Bus`], the runtime's service that runs a [`ShardOp`] on the
//! shard owning the state it touches (locally, or over the cross-shard mesh) and provides time.
//! The runtime (`crate::runtime`, the only place that knows the io_uring executor) implements [`Bus`]; tests
//! implement it in memory.
//!
//! State ownership:
//! - [`crate::shard::state::ShardState`]: one per shard; the partitions it owns (logs and producer states)
//!   and its copy of the topic registry. Changed only by [`ShardOp`]s executed on that shard.
//! - [`crate::shard::registry::TopicRegistry`]: immutable snapshots; shard 0 computes and persists changes
//!   ([`admin`]) and installs them on every shard.
//!
//! Handlers: [`dispatch`] routes a parsed request to its family: [`api_versions`],
//! [`metadata`] (Metadata, FindCoordinator), [`admin`] (CreateTopics, DeleteTopics,
//! CreatePartitions, IncrementalAlterConfigs, InitProducerId), [`delete_admin`]
//! (DeleteRecords, DeleteGroups), [`cluster_admin`] (DescribeCluster, DescribeProducers,
//! OffsetForLeaderEpoch), [`configs`] (DescribeConfigs), [`produce`],
//! [`fetch`] (Fetch, ListOffsets), [`share_api`] (ShareGroupHeartbeat, ShareFetch,
//! ShareAcknowledge), [`share_admin`] (ListGroups, ShareGroupDescribe, and describing,
//! altering and deleting share-group offsets), [`group_api`] (consumer groups: JoinGroup,
//! SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch; state in `crate::group`),
//! [`group_admin`] (DescribeGroups, OffsetDelete), [`scram_api`] (Describe/AlterUserScramCredentials,
//! SaslHandshake / SaslAuthenticate outside the SASL exchange).

pub mod acl_api;
pub mod admin;
pub mod api_versions;
pub mod authorize;
pub mod cluster_admin;
pub mod codes;
pub mod configs;
pub mod consumer_group_api;
pub mod delete_admin;
pub mod dispatch;
pub mod fetch;
pub mod group_admin;
pub mod group_api;
pub mod metadata;
pub mod produce;
pub mod producer_txn_api;
pub mod producer_txn_offset_api;
pub mod producer_txn_share_api;
pub mod scram_api;
pub mod share_admin;
pub mod share_api;
pub mod share_txn_api;

use crate::model::ShardId;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use crate::shard::ops::{ShardOp, ShardReply};
use crate::shard::registry::TopicRegistry;

/// Kafka's principal of an unauthenticated client.
pub const ANONYMOUS_PRINCIPAL: &str = "User:ANONYMOUS";

/// What a handler knows about the connection a request came on.
#[derive(Clone, Debug)]
pub struct ConnInfo {
    /// The local address the client connected to, or the broker's `--advertised` address if
    /// set; advertised as this broker's address, so a client reaches the broker the way it
    /// already did.
    pub local_addr: SocketAddr,
    pub peer_addr: SocketAddr,
    /// Share-group members (group id, member id) that fetched or acknowledged on this
    /// connection: when it drops, their sessions close and their acquired records are
    /// released at once, as Kafka does.
    pub share_members: Rc<RefCell<BTreeSet<(String, String)>>>,
    /// Unique in the process: a share session remembers the connection that owns it.
    pub id: u64,
    /// Who the client is (Kafka's `KafkaPrincipal` as `User:NAME`): `User:ANONYMOUS` until a
    /// client certificate (mutual TLS) or SASL names it. Set by the connection (runtime).
    pub principal: Rc<RefCell<String>>,
    /// The authorizer's settings when one is configured (`authorizer.class.name`); `None`:
    /// every request is allowed. Set by the connection (runtime).
    pub authorizer: Option<Arc<crate::security::authz::AuthorizerConfig>>,
}

impl ConnInfo {
    pub fn new(local_addr: SocketAddr, peer_addr: SocketAddr) -> ConnInfo {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        ConnInfo {
            local_addr,
            peer_addr,
            share_members: Rc::default(),
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            principal: Rc::new(RefCell::new(ANONYMOUS_PRINCIPAL.to_string())),
            authorizer: None,
        }
    }
}

/// The runtime's services to handlers. Implemented by `runtime` and by test doubles.
pub trait Bus {
    /// The shard this handler runs on.
    fn local_shard(&self) -> ShardId;
    /// How many shards the broker runs.
    fn shard_count(&self) -> usize;
    /// The registry snapshot the local shard holds.
    fn registry(&self) -> Arc<TopicRegistry>;
    /// Wall-clock milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
    /// Runs `op` on `shard` (locally when it is this shard) and returns its reply.
    fn call(&self, shard: ShardId, op: ShardOp) -> impl Future<Output = ShardReply>;
    /// Runs `op` on `shard` and returns its own reply (`shard::call::Op`), or why there is none;
    /// handlers call this, never matching the transport's [`ShardReply`].
    fn call_op<O: crate::shard::call::Op>(
        &self,
        shard: ShardId,
        op: O,
    ) -> impl Future<Output = Result<O::Reply, crate::shard::ops::CallError>> {
        let reply = self.call(shard, op.into_op());
        async move { crate::shard::call::typed::<O>(reply.await) }
    }
    /// Completes after `ms` milliseconds.
    fn sleep_ms(&self, ms: u64) -> impl Future<Output = ()>;
    /// The broker's SCRAM credentials (`None`: a test double without them).
    fn credentials(&self) -> Option<Arc<dyn CredentialAdmin>> {
        None
    }
}

/// The broker's SCRAM credentials, shared by every shard: read them, or change them (the
/// change is durable before `update` returns `Ok`, and visible to every shard at once).
pub trait CredentialAdmin: Send + Sync {
    fn snapshot(&self) -> Arc<crate::security::scram::ScramCredentials>;
    /// Runs `edit` on a copy, persists it, then installs it; on an error nothing changed.
    fn update(
        &self,
        edit: &mut dyn FnMut(&mut crate::security::scram::ScramCredentials),
    ) -> Result<(), String>;
}

/// Refuses a request that names more items than any legitimate one could (a small request
/// must not make the broker build an outsized answer).
pub fn check_count(what: &str, count: usize, max: usize) -> Result<(), Outcome> {
    if count > max {
        Err(Outcome::Close(format!(
            "request names {count} {what}; at most {max} are accepted"
        )))
    } else {
        Ok(())
    }
}

/// Decodes `request`'s body and refuses it, as [`check_count`] does, when it names more than
/// `max` `what` (counted by `count`); a body that does not decode closes the connection.
pub(crate) fn decode_counted<T: kafka_protocol::protocol::Decodable>(
    request: &crate::protocol::codec::Request,
    what: &str,
    max: usize,
    count: impl FnOnce(&T) -> usize,
) -> Result<T, Outcome> {
    let decoded: T =
        crate::protocol::codec::decode_body(request).map_err(|e| Outcome::Close(e.to_string()))?;
    check_count(what, count(&decoded), max)?;
    Ok(decoded)
}

/// Encodes `body` as the response to `request` (its API, version and correlation id); a body
/// that cannot be encoded at that version closes the connection.
pub(crate) fn respond<T: kafka_protocol::protocol::Encodable>(
    request: &crate::protocol::codec::Request,
    body: &T,
) -> Outcome {
    match crate::protocol::codec::encode_response(
        request.spec,
        request.api_version,
        request.correlation_id,
        body,
    ) {
        Ok(frame) => Outcome::Respond(frame),
        Err(e) => Outcome::Close(e.to_string()),
    }
}

/// [`respond`] with `payloads` (the response's record fields, as the log handed them out)
/// left in their own `Bytes`: the same frame, in pieces the connection writes without copying
/// the records (`protocol::gather`).
pub(crate) fn respond_gathered<'a, T: kafka_protocol::protocol::Encodable>(
    request: &crate::protocol::codec::Request,
    body: &T,
    payloads: impl IntoIterator<Item = &'a bytes::Bytes>,
) -> Outcome {
    match crate::protocol::gather::encode_response_gathered(
        request.spec,
        request.api_version,
        request.correlation_id,
        body,
        payloads,
    ) {
        Ok(frame) => Outcome::RespondGathered(frame),
        Err(e) => Outcome::Close(e.to_string()),
    }
}

/// What the connection does after a request was handled.
#[derive(Debug)]
pub enum Outcome {
    /// Write this frame (size prefix included).
    Respond(bytes::Bytes),
    /// Write this frame, given in pieces (Fetch and ShareFetch: the records are the log's
    /// `Bytes`); on the wire the same as `Respond` of the pieces concatenated.
    RespondGathered(crate::protocol::gather::GatheredFrame),
    /// Write nothing (produce with acks=0).
    NoResponse,
    /// Close the connection after the responses before this one (malformed request).
    Close(String),
}

impl Outcome {
    /// A gathered frame as one buffer (for code that decodes the answer again: the
    /// authorizer's filtered requests); other outcomes unchanged.
    pub fn flattened(self) -> Outcome {
        match self {
            Outcome::RespondGathered(frame) => Outcome::Respond(frame.to_bytes()),
            other => other,
        }
    }
}
