//! The generated message codecs (`src/protocol/generated/`, written by `tools/protocol-gen.rs`).
//!
//! - The checked-in files are exactly what the specs generate: the generator runs in `--check`
//!   mode, reading Kafka 4.4's specs from the kafka-clients jar (installed by
//!   `tools/install-test-deps.sh`; the test fails, naming that command, if it is missing) and
//!   the project's `schemas/Share*.json`.
//! - Every generated Kafka message round-trips at every valid version, and at the versions the
//!   `kafka-protocol` crate (Kafka 4.1 schemas) also knows, both encode the same bytes and each
//!   decodes the other's.
//! - Version-specific fields: absent below their version (a non-default value in an older
//!   version is refused unless the spec marks it ignorable), nullability per version.

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::{Decodable, Encodable, Message};
use lockstep::protocol::generated::{
    describe_share_group_offsets_request as dsgo_req,
    describe_share_group_offsets_response as dsgo, share_acknowledge_request as ack_req,
    share_acknowledge_response as ack, share_fetch_request as fetch_req,
    share_fetch_response as fetch,
};
use std::fmt::Debug;
use std::path::Path;
use uuid::Uuid;

#[test]
fn checked_in_codecs_match_the_specs() {
    let jar =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-deps/jars/kafka-clients-4.4.0.jar");
    assert!(
        jar.is_file(),
        "{} is missing: run tools/install-test-deps.sh (the generator check reads Kafka 4.4's \
         message specs from it)",
        jar.display()
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_lockstep-protocol-gen"))
        .arg("--check")
        .output()
        .expect("run lockstep-protocol-gen --check");
    assert!(
        out.status.success(),
        "lockstep-protocol-gen --check failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn encode<T: Encodable>(m: &T, version: i16) -> Vec<u8> {
    let mut buf = BytesMut::new();
    m.encode(&mut buf, version)
        .unwrap_or_else(|e| panic!("encode v{version}: {e}"));
    assert_eq!(
        m.compute_size(version).unwrap(),
        buf.len(),
        "compute_size agrees with encode"
    );
    buf.to_vec()
}

fn decode<T: Decodable>(bytes: &[u8], version: i16) -> T {
    let mut buf = Bytes::copy_from_slice(bytes);
    let out = T::decode(&mut buf, version).unwrap_or_else(|e| panic!("decode v{version}: {e}"));
    assert!(buf.is_empty(), "decode consumed every byte");
    out
}

/// Round trip at every valid version; every truncation is an error, never a panic.
fn round_trips<T: Encodable + Decodable + Message + PartialEq + Debug>(m: &T) {
    for version in T::VERSIONS.min..=T::VERSIONS.max {
        let bytes = encode(m, version);
        assert_eq!(&decode::<T>(&bytes, version), m, "v{version}");
        for cut in 0..bytes.len() {
            let mut short = Bytes::copy_from_slice(&bytes[..cut]);
            assert!(
                T::decode(&mut short, version).is_err(),
                "v{version} cut at {cut}"
            );
        }
    }
    assert!(m.encode(&mut BytesMut::new(), T::VERSIONS.max + 1).is_err());
    assert!(m.encode(&mut BytesMut::new(), T::VERSIONS.min - 1).is_err());
}

/// Our message and the crate's, at a version both know: same bytes, and each decodes the other.
fn same_as_crate<Ours, Theirs>(ours: &Ours, version: i16)
where
    Ours: Encodable + Decodable + PartialEq + Debug,
    Theirs: Encodable + Decodable + PartialEq + Debug,
{
    let bytes = encode(ours, version);
    let theirs: Theirs = decode(&bytes, version);
    assert_eq!(
        encode(&theirs, version),
        bytes,
        "crate re-encodes the same bytes"
    );
    assert_eq!(&decode::<Ours>(&bytes, version), ours);
}

fn fetch_request() -> fetch_req::ShareFetchRequest {
    let batch = fetch_req::AcknowledgementBatch {
        first_offset: 10,
        last_offset: 12,
        acknowledge_types: vec![1, 2, 3],
    };
    fetch_req::ShareFetchRequest {
        group_id: Some("g".into()),
        member_id: Some("member-1".into()),
        share_session_epoch: 3,
        max_wait_ms: 500,
        min_bytes: 1,
        max_bytes: 1 << 20,
        max_records: 500,
        batch_size: 100,
        share_acquire_mode: 0,
        is_renew_ack: false,
        topics: vec![fetch_req::FetchTopic {
            topic_id: Uuid::from_u128(7),
            partitions: vec![fetch_req::FetchPartition {
                partition_index: 2,
                partition_max_bytes: 0,
                acknowledgement_batches: vec![batch.clone(), batch],
            }],
        }],
        forgotten_topics_data: vec![fetch_req::ForgottenTopic {
            topic_id: Uuid::from_u128(8),
            partitions: vec![0, 1],
        }],
    }
}

fn fetch_response() -> fetch::ShareFetchResponse {
    fetch::ShareFetchResponse {
        throttle_time_ms: 0,
        error_code: 0,
        error_message: None,
        acquisition_lock_timeout_ms: 30_000,
        responses: vec![fetch::ShareFetchableTopicResponse {
            topic_id: Uuid::from_u128(7),
            partitions: vec![fetch::PartitionData {
                partition_index: 2,
                error_code: 0,
                error_message: None,
                acknowledge_error_code: 121,
                acknowledge_error_message: Some("not acquired".into()),
                current_leader: fetch::LeaderIdAndEpoch {
                    leader_id: 0,
                    leader_epoch: 0,
                },
                records: Some(Bytes::from_static(b"not a real batch")),
                acquired_records: vec![fetch::AcquiredRecords {
                    first_offset: 13,
                    last_offset: 20,
                    delivery_count: 2,
                }],
            }],
        }],
        node_endpoints: vec![fetch::NodeEndpoint {
            node_id: 0,
            host: "127.0.0.1".into(),
            port: 9092,
            rack: None,
        }],
    }
}

fn ack_request() -> ack_req::ShareAcknowledgeRequest {
    ack_req::ShareAcknowledgeRequest {
        group_id: Some("g".into()),
        member_id: Some("member-1".into()),
        share_session_epoch: 4,
        is_renew_ack: false,
        topics: vec![ack_req::AcknowledgeTopic {
            topic_id: Uuid::from_u128(7),
            partitions: vec![ack_req::AcknowledgePartition {
                partition_index: 2,
                acknowledgement_batches: vec![ack_req::AcknowledgementBatch {
                    first_offset: 13,
                    last_offset: 13,
                    acknowledge_types: vec![1],
                }],
            }],
        }],
    }
}

fn ack_response() -> ack::ShareAcknowledgeResponse {
    ack::ShareAcknowledgeResponse {
        throttle_time_ms: 1,
        error_code: 0,
        error_message: None,
        acquisition_lock_timeout_ms: 0,
        responses: vec![ack::ShareAcknowledgeTopicResponse {
            topic_id: Uuid::from_u128(7),
            partitions: vec![ack::PartitionData {
                partition_index: 2,
                error_code: 0,
                error_message: None,
                current_leader: ack::LeaderIdAndEpoch {
                    leader_id: 0,
                    leader_epoch: 0,
                },
            }],
        }],
        node_endpoints: Vec::new(),
    }
}

fn dsgo_request() -> dsgo_req::DescribeShareGroupOffsetsRequest {
    dsgo_req::DescribeShareGroupOffsetsRequest {
        groups: vec![
            dsgo_req::DescribeShareGroupOffsetsRequestGroup {
                group_id: "g".into(),
                topics: Some(vec![dsgo_req::DescribeShareGroupOffsetsRequestTopic {
                    topic_name: "orders".into(),
                    partitions: vec![0, 1],
                }]),
            },
            dsgo_req::DescribeShareGroupOffsetsRequestGroup {
                group_id: "all".into(),
                topics: None,
            },
        ],
    }
}

fn dsgo_response(lag: i64) -> dsgo::DescribeShareGroupOffsetsResponse {
    dsgo::DescribeShareGroupOffsetsResponse {
        throttle_time_ms: 0,
        groups: vec![dsgo::DescribeShareGroupOffsetsResponseGroup {
            group_id: "g".into(),
            topics: vec![dsgo::DescribeShareGroupOffsetsResponseTopic {
                topic_name: "orders".into(),
                topic_id: Uuid::from_u128(7),
                partitions: vec![dsgo::DescribeShareGroupOffsetsResponsePartition {
                    partition_index: 0,
                    start_offset: 40,
                    leader_epoch: 0,
                    lag,
                    error_code: 0,
                    error_message: None,
                }],
            }],
            error_code: 0,
            error_message: None,
        }],
    }
}

#[test]
fn kafka_messages_round_trip_at_every_version() {
    round_trips(&fetch_request());
    round_trips(&fetch_response());
    round_trips(&ack_request());
    round_trips(&ack_response());
    round_trips(&dsgo_request());
    round_trips(&dsgo_response(-1));
    // Defaults round-trip too.
    round_trips(&fetch_req::ShareFetchRequest::default());
    round_trips(&dsgo::DescribeShareGroupOffsetsResponse::default());
}

#[test]
fn spec_defaults_are_kept() {
    let r = fetch_req::ShareFetchRequest::default();
    assert_eq!(r.max_bytes, 0x7fff_ffff);
    assert_eq!(r.group_id, None, "default null");
    assert_eq!(
        r.member_id,
        Some(String::new()),
        "nullable without a null default"
    );
    let p = dsgo::DescribeShareGroupOffsetsResponsePartition::default();
    assert_eq!(p.lag, -1);
    assert_eq!(<fetch_req::ShareFetchRequest as Message>::VERSIONS.max, 2);
    assert_eq!(<fetch_req::ShareFetchRequest as Message>::VERSIONS.min, 1);
    assert_eq!(
        <dsgo_req::DescribeShareGroupOffsetsRequest as Message>::VERSIONS.max,
        1
    );
}

#[test]
fn the_versions_the_crate_knows_encode_alike() {
    use kafka_protocol::messages as k;
    same_as_crate::<_, k::ShareFetchRequest>(&fetch_request(), 1);
    same_as_crate::<_, k::ShareFetchResponse>(&fetch_response(), 1);
    same_as_crate::<_, k::ShareAcknowledgeRequest>(&ack_request(), 1);
    same_as_crate::<_, k::ShareAcknowledgeResponse>(&ack_response(), 1);
    same_as_crate::<_, k::DescribeShareGroupOffsetsRequest>(&dsgo_request(), 0);
    same_as_crate::<_, k::DescribeShareGroupOffsetsResponse>(&dsgo_response(-1), 0);
}

#[test]
fn version_2_fields() {
    // ShareFetch v2 adds ShareAcquireMode (INT8, ignorable) and IsRenewAck (BOOL) after
    // BatchSize: two bytes more than v1.
    let mut r = fetch_request();
    let v1 = encode(&r, 1);
    r.share_acquire_mode = 1;
    r.is_renew_ack = true;
    let v2 = encode(&r, 2);
    assert_eq!(v2.len(), v1.len() + 2);
    let back: fetch_req::ShareFetchRequest = decode(&v2, 2);
    assert_eq!(back.share_acquire_mode, 1);
    assert!(back.is_renew_ack);
    // IsRenewAck is not ignorable: a v1 request cannot carry it. ShareAcquireMode is ignorable:
    // dropped at v1.
    assert!(r.encode(&mut BytesMut::new(), 1).is_err());
    r.is_renew_ack = false;
    let dropped: fetch_req::ShareFetchRequest = decode(&encode(&r, 1), 1);
    assert_eq!(dropped.share_acquire_mode, 0);

    // ShareAcknowledge v2: IsRenewAck after ShareSessionEpoch; the response's
    // AcquisitionLockTimeoutMs (ignorable) after ErrorMessage.
    let mut a = ack_request();
    a.is_renew_ack = true;
    a.topics[0].partitions[0].acknowledgement_batches[0].acknowledge_types = vec![4];
    let back: ack_req::ShareAcknowledgeRequest = decode(&encode(&a, 2), 2);
    assert_eq!(back, a);
    assert!(a.encode(&mut BytesMut::new(), 1).is_err());
    let mut resp = ack_response();
    resp.acquisition_lock_timeout_ms = 15_000;
    assert_eq!(encode(&resp, 2).len(), encode(&resp, 1).len() + 4);

    // DescribeShareGroupOffsets v1: Lag (INT64, ignorable, default -1) after LeaderEpoch.
    let with_lag = dsgo_response(25);
    let v1 = encode(&with_lag, 1);
    let v0 = encode(&with_lag, 0);
    assert_eq!(v1.len(), v0.len() + 8);
    assert_eq!(
        decode::<dsgo::DescribeShareGroupOffsetsResponse>(&v1, 1),
        with_lag
    );
    let old: dsgo::DescribeShareGroupOffsetsResponse = decode(&v0, 0);
    assert_eq!(old.groups[0].topics[0].partitions[0].lag, -1);
}

#[test]
fn nullability_follows_the_version() {
    // ShareFetchResponse Records: nullable only in version 0 (not served), so null at v1 is
    // refused on both sides.
    let mut r = fetch_response();
    r.responses[0].partitions[0].records = None;
    assert!(r.encode(&mut BytesMut::new(), 1).is_err());
    // A null ErrorMessage is fine in every version.
    let mut bytes = encode(&fetch_response(), 1);
    assert!(!bytes.is_empty());
    // Unknown tagged fields at the top level are skipped.
    bytes.pop();
    bytes.extend_from_slice(&[0x01, 0x09, 0x02, 0xaa, 0xbb]);
    assert_eq!(
        decode::<fetch::ShareFetchResponse>(&bytes, 1),
        fetch_response()
    );
}

/// DeleteGroups v3 (Kafka 4.4): the response body Kafka 4.4 at 127.0.0.1:19092 sent for
/// groups ["pA-nosuch-group", ""] (both GROUP_ID_NOT_FOUND, 69; ErrorMessage null; Kafka
/// answered the empty id first), after the 5-byte response header; v0–2 as the crate
/// encodes them.
#[test]
fn delete_groups_v3() {
    use lockstep::protocol::generated::{
        delete_groups_request as dg_req, delete_groups_response as dg,
    };
    let observed: &[u8] = &[
        0, 0, 0, 0, 3, 1, 0, 69, 0, 0, 16, b'p', b'A', b'-', b'n', b'o', b's', b'u', b'c', b'h',
        b'-', b'g', b'r', b'o', b'u', b'p', 0, 69, 0, 0, 0,
    ];
    let result = |group: &str| dg::DeletableGroupResult {
        group_id: group.into(),
        error_code: 69,
        error_message: None,
    };
    let response = dg::DeleteGroupsResponse {
        throttle_time_ms: 0,
        results: vec![result(""), result("pA-nosuch-group")],
    };
    assert_eq!(decode::<dg::DeleteGroupsResponse>(observed, 3), response);
    assert_eq!(encode(&response, 3), observed);
    round_trips(&response);
    // ErrorMessage is v3+ (ignorable: dropped below).
    let mut with_message = response.clone();
    with_message.results[0].error_message = Some("why".into());
    let v3 = encode(&with_message, 3);
    assert_eq!(decode::<dg::DeleteGroupsResponse>(&v3, 3), with_message);
    assert_eq!(
        decode::<dg::DeleteGroupsResponse>(&encode(&with_message, 2), 2),
        response
    );
    let request = dg_req::DeleteGroupsRequest {
        groups_names: vec!["a".into(), "bc".into()],
    };
    round_trips(&request);
    use kafka_protocol::messages as k;
    for version in 0..=2 {
        same_as_crate::<_, k::DeleteGroupsRequest>(&request, version);
        same_as_crate::<_, k::DeleteGroupsResponse>(&response, version);
    }
}
