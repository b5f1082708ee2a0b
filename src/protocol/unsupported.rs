//! The answer to a request this broker does not serve: an unknown API key, or a known key at a
//! version outside `apis::SUPPORTED_APIS`. The connection stays open: an unknown API
//! key or version gets an error answer in Kafka's shape, never a closed connection.
//!
//! What Kafka 4.4 does (measured against the Kafka 4.4 reference broker, raw socket, each
//! request followed by ApiVersions v0 on the same connection): ApiVersions at a version it does
//! not serve is answered with UNSUPPORTED_VERSION (35) in the v0 body, header v0; every other
//! unknown key (999, -1, 4 LeaderAndIsr, 57 UpdateFeatures on a broker) or unserved version
//! (Metadata v99 with header v1 or v2, JoinGroup v99) gets no answer and a closed connection —
//! its `SocketServer` refuses them before any handler, and the later ApiVersions is never read.
//!
//! What Lockstep does instead (the frame [`error_frame`] builds):
//! - ApiVersions at an unserved version: Kafka's bytes (v0 body, error 35, the served keys).
//! - A served key at an unserved version: the response of that key at the *nearest* served
//!   version (the minimum when asked below it, the maximum when above), with that version's
//!   response header and the key's default body, its top-level `ErrorCode` set to
//!   UNSUPPORTED_VERSION where the response has one at that version. A client that decodes it
//!   as the version it asked for may misread the body; the correlation id is always right.
//! - An unknown key: response header v0 (the correlation id) and a body of one INT16,
//!   UNSUPPORTED_VERSION — the shape ApiVersions' own error answer starts with.
//!
//! Pure: bytes in, bytes out.

use super::apis::{self, api_spec, API_VERSIONS};
use super::codec::encode_api_versions_unsupported;
use super::framing::SIZE_PREFIX_BYTES;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ResponseHeader;
use kafka_protocol::protocol::Encodable;
use kafka_protocol::ResponseError;

/// UNSUPPORTED_VERSION.
const UNSUPPORTED: i16 = 35;

/// The version of `spec` nearest to `version` (the answer's version).
pub fn nearest_version(spec: &apis::ApiSpec, version: i16) -> i16 {
    version.clamp(spec.min_version, spec.max_version)
}

/// The response frame (size prefix included) answering a request of `api_key` at `api_version`
/// that is not served.
pub fn error_frame(api_key: i16, api_version: i16, correlation_id: i32) -> Bytes {
    debug_assert_eq!(ResponseError::UnsupportedVersion.code(), UNSUPPORTED);
    if api_key == API_VERSIONS {
        return encode_api_versions_unsupported(correlation_id);
    }
    let (header_version, body) = match api_spec(api_key) {
        Some(spec) => {
            let version = nearest_version(spec, api_version);
            match typed_body(api_key, version) {
                Some(body) => (spec.response_header_version(version), body),
                None => (0, minimal_body()),
            }
        }
        None => (0, minimal_body()),
    };
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    let mut head = BytesMut::new();
    header
        .encode(&mut head, header_version)
        .expect("a response header always encodes");
    let size = head.len() + body.len();
    let mut out = BytesMut::with_capacity(SIZE_PREFIX_BYTES + size);
    out.put_i32(i32::try_from(size).expect("an error frame is small"));
    out.extend_from_slice(&head);
    out.extend_from_slice(&body);
    out.freeze()
}

fn minimal_body() -> BytesMut {
    let mut body = BytesMut::with_capacity(2);
    body.put_i16(UNSUPPORTED);
    body
}

/// `T::default()` with `set` applied, encoded at `version`; without `set` when the field it
/// sets does not exist at that version.
fn encode_default<T: Encodable + Default>(version: i16, set: impl Fn(&mut T)) -> Option<BytesMut> {
    let mut with_error = T::default();
    set(&mut with_error);
    let mut buf = BytesMut::new();
    if with_error.encode(&mut buf, version).is_ok() {
        return Some(buf);
    }
    let mut buf = BytesMut::new();
    T::default().encode(&mut buf, version).ok()?;
    Some(buf)
}

/// The error body of a served key at a served `version`; `None` for a key without an entry
/// here (answered with the minimal frame).
fn typed_body(api_key: i16, version: i16) -> Option<BytesMut> {
    use crate::protocol::generated as g;
    use kafka_protocol::messages as m;
    macro_rules! plain {
        ($ty:ty) => {
            encode_default::<$ty>(version, |_| {})
        };
    }
    macro_rules! with_error {
        ($ty:ty) => {
            encode_default::<$ty>(version, |r| r.error_code = UNSUPPORTED)
        };
    }
    match api_key {
        apis::PRODUCE => plain!(m::ProduceResponse),
        apis::FETCH => with_error!(m::FetchResponse),
        apis::LIST_OFFSETS => plain!(m::ListOffsetsResponse),
        apis::METADATA => with_error!(m::MetadataResponse),
        apis::FIND_COORDINATOR => with_error!(m::FindCoordinatorResponse),
        apis::LIST_GROUPS => with_error!(m::ListGroupsResponse),
        apis::CREATE_TOPICS => plain!(m::CreateTopicsResponse),
        apis::DELETE_TOPICS => plain!(m::DeleteTopicsResponse),
        apis::DELETE_RECORDS => plain!(m::DeleteRecordsResponse),
        apis::INIT_PRODUCER_ID => with_error!(m::InitProducerIdResponse),
        apis::OFFSET_FOR_LEADER_EPOCH => plain!(m::OffsetForLeaderEpochResponse),
        apis::DESCRIBE_CONFIGS => plain!(m::DescribeConfigsResponse),
        apis::CREATE_PARTITIONS => plain!(m::CreatePartitionsResponse),
        apis::DELETE_GROUPS => plain!(g::DeleteGroupsResponse),
        apis::INCREMENTAL_ALTER_CONFIGS => plain!(m::IncrementalAlterConfigsResponse),
        apis::DESCRIBE_CLUSTER => with_error!(m::DescribeClusterResponse),
        apis::DESCRIBE_PRODUCERS => plain!(m::DescribeProducersResponse),
        apis::SHARE_GROUP_HEARTBEAT => with_error!(m::ShareGroupHeartbeatResponse),
        apis::SHARE_GROUP_DESCRIBE => plain!(m::ShareGroupDescribeResponse),
        apis::SHARE_FETCH => with_error!(g::ShareFetchResponse),
        apis::SHARE_ACKNOWLEDGE => with_error!(g::ShareAcknowledgeResponse),
        apis::DESCRIBE_SHARE_GROUP_OFFSETS => plain!(g::DescribeShareGroupOffsetsResponse),
        apis::ALTER_SHARE_GROUP_OFFSETS => with_error!(m::AlterShareGroupOffsetsResponse),
        apis::DELETE_SHARE_GROUP_OFFSETS => with_error!(m::DeleteShareGroupOffsetsResponse),
        // The consumer-group keys, by the crate's numbers.
        k if k == m::ApiKey::OffsetCommit as i16 => plain!(m::OffsetCommitResponse),
        k if k == m::ApiKey::OffsetFetch as i16 => with_error!(m::OffsetFetchResponse),
        k if k == m::ApiKey::JoinGroup as i16 => with_error!(m::JoinGroupResponse),
        k if k == m::ApiKey::Heartbeat as i16 => with_error!(m::HeartbeatResponse),
        k if k == m::ApiKey::LeaveGroup as i16 => with_error!(m::LeaveGroupResponse),
        k if k == m::ApiKey::SyncGroup as i16 => with_error!(m::SyncGroupResponse),
        k if k == m::ApiKey::DescribeGroups as i16 => plain!(m::DescribeGroupsResponse),
        k if k == m::ApiKey::OffsetDelete as i16 => with_error!(m::OffsetDeleteResponse),
        k if k == m::ApiKey::TxnOffsetCommit as i16 => plain!(m::TxnOffsetCommitResponse),
        k if k == m::ApiKey::ConsumerGroupHeartbeat as i16 => {
            with_error!(m::ConsumerGroupHeartbeatResponse)
        }
        k if k == m::ApiKey::ConsumerGroupDescribe as i16 => {
            plain!(m::ConsumerGroupDescribeResponse)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::apis::{METADATA, SHARE_FETCH, SUPPORTED_APIS};
    use kafka_protocol::messages::{
        ApiVersionsResponse, FindCoordinatorResponse, MetadataResponse,
    };
    use kafka_protocol::protocol::Decodable;

    fn split(frame: &Bytes) -> (i32, Bytes) {
        let size = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
        assert_eq!(size as usize, frame.len() - 4);
        let correlation = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
        (correlation, frame.slice(8..))
    }

    #[test]
    fn unknown_key_gets_header_v0_and_the_error_code() {
        let frame = error_frame(1999, 0, 42);
        let (correlation, body) = split(&frame);
        assert_eq!(correlation, 42);
        assert_eq!(&body[..], &35i16.to_be_bytes());
    }

    #[test]
    fn api_versions_gets_kafkas_v0_error_body() {
        let (correlation, mut body) = split(&error_frame(API_VERSIONS, 99, 7));
        assert_eq!(correlation, 7);
        let decoded = ApiVersionsResponse::decode(&mut body, 0).unwrap();
        assert_eq!(decoded.error_code, 35);
        assert_eq!(decoded.api_keys.len(), SUPPORTED_APIS.len());
    }

    #[test]
    fn served_key_answers_at_the_nearest_version() {
        // Metadata v99 → v13 (flexible: header v1 = correlation id + empty tagged fields).
        let (correlation, body) = split(&error_frame(METADATA, 99, 9));
        assert_eq!(correlation, 9);
        assert_eq!(body[0], 0, "header tagged fields");
        let decoded = MetadataResponse::decode(&mut body.slice(1..), 13).unwrap();
        assert_eq!(decoded.error_code, 35);
        // FindCoordinator v-1 → v0 (header v0, error code first).
        let (_, mut body) = split(&error_frame(apis::FIND_COORDINATOR, -1, 1));
        let decoded = FindCoordinatorResponse::decode(&mut body, 0).unwrap();
        assert_eq!(decoded.error_code, 35);
        // ShareFetch v99 → v2: throttle time, then the error code.
        let (_, body) = split(&error_frame(SHARE_FETCH, 99, 1));
        assert_eq!(&body[1..5], &0i32.to_be_bytes());
        assert_eq!(&body[5..7], &35i16.to_be_bytes());
    }

    #[test]
    fn served_kafka_keys_have_a_typed_body_at_both_ends() {
        // The keys served when this was written; keys added later may fall back to the
        // minimal frame until they get an entry in `typed_body`.
        let keys = [
            0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 19, 20, 21, 22, 23, 32, 37, 42, 44, 47,
            60, 61, 68, 69, 76, 77,
        ];
        for spec in SUPPORTED_APIS.iter().filter(|s| keys.contains(&s.key)) {
            for version in [spec.min_version, spec.max_version] {
                assert!(
                    typed_body(spec.key, version).is_some(),
                    "{} v{version}",
                    spec.name
                );
            }
        }
    }
}
