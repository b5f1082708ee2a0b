//! Request parsing and response encoding around the `kafka-protocol` crate.
//!
//! A frame is classified by [`parse_frame`] into what dispatch does with it:
//! - a served API at a served version → [`Inbound::Request`] (header parsed, body kept raw);
//! - an unknown key, or a served key at an unserved version → [`Inbound::Unsupported`],
//!   answered with `unsupported::error_frame` (UNSUPPORTED_VERSION; ApiVersions gets Kafka's
//!   v0-format body) and the connection kept — Kafka 4.4 closes the connection instead for
//!   every key but ApiVersions (measured; see `unsupported`);
//! - a header too short or malformed → [`Inbound::Reject`]: the connection is closed after
//!   earlier responses (there is no correlation id to answer, or the client id is malformed).
//!
//! Bodies are decoded with [`decode_body`], which first runs the structural guard so the
//! decoder cannot be made to reserve memory out of proportion to the frame.
//!
//! Nothing here needs the `kafka-protocol` crate to know an API key: header versions come from
//! [`ApiSpec::flexible_min`], and bodies are any `Decodable`/`Encodable` — the crate's messages
//! or the project's own (`share_txn`, keys 1000–1005).

use super::apis::{api_spec, ApiSpec, API_VERSIONS, SUPPORTED_APIS};
use super::framing::SIZE_PREFIX_BYTES;
use super::guard::{check_request, GuardError};
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};
use std::fmt;

/// Bytes of api key + api version + correlation id at the start of every request header.
pub const REQUEST_PREFIX_BYTES: usize = 8;

/// A parsed request whose body is still raw.
#[derive(Clone, Debug)]
pub struct Request {
    pub spec: &'static ApiSpec,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
    /// The body after the header.
    pub body: Bytes,
}

/// Why a frame is refused and its connection closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reject {
    ShortHeader { bytes: usize },
    BadHeader { api_key: i16, reason: String },
}

impl fmt::Display for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reject::ShortHeader { bytes } => {
                write!(
                    f,
                    "request of {bytes} bytes is shorter than a request header"
                )
            }
            Reject::BadHeader { api_key, reason } => {
                write!(
                    f,
                    "malformed request header for API key {api_key}: {reason}"
                )
            }
        }
    }
}

/// What to do with one frame.
#[derive(Clone, Debug)]
pub enum Inbound {
    Request(Request),
    /// An unknown key, or a served key at a version outside its range (ApiVersions included):
    /// answered with `unsupported::error_frame`; the connection stays open.
    Unsupported {
        api_key: i16,
        api_version: i16,
        correlation_id: i32,
    },
    Reject(Reject),
}

impl Inbound {
    /// The answer to [`Inbound::Unsupported`] (size prefix included).
    pub fn unsupported_frame(api_key: i16, api_version: i16, correlation_id: i32) -> Bytes {
        super::unsupported::error_frame(api_key, api_version, correlation_id)
    }
}

/// Classifies a request frame (size prefix already removed) against [`SUPPORTED_APIS`].
pub fn parse_frame(frame: Bytes) -> Inbound {
    parse_frame_in(SUPPORTED_APIS, frame)
}

/// Classifies a request frame against `table`. Nothing here depends on the `kafka-protocol`
/// crate knowing the key: the header version comes from the spec's `flexible_min`, and the
/// crate's header decoder does not look at the key. Tests use this with tables holding the
/// project's own keys (1000–1005).
pub fn parse_frame_in(table: &'static [ApiSpec], mut frame: Bytes) -> Inbound {
    if frame.len() < REQUEST_PREFIX_BYTES {
        return Inbound::Reject(Reject::ShortHeader { bytes: frame.len() });
    }
    let api_key = i16::from_be_bytes([frame[0], frame[1]]);
    let api_version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let unsupported = Inbound::Unsupported {
        api_key,
        api_version,
        correlation_id,
    };
    let Some(spec) = table.iter().find(|spec| spec.key == api_key) else {
        return unsupported;
    };
    if !spec.supports(api_version) {
        return unsupported;
    }
    let header_version = spec.request_header_version(api_version);
    let header = match RequestHeader::decode(&mut frame, header_version) {
        Ok(header) => header,
        Err(e) => {
            return Inbound::Reject(Reject::BadHeader {
                api_key,
                reason: e.to_string(),
            })
        }
    };
    debug_assert_eq!(header.correlation_id, correlation_id);
    Inbound::Request(Request {
        spec,
        api_version,
        correlation_id,
        client_id: header.client_id.map(|id| id.to_string()),
        body: frame,
    })
}

/// Why a body could not be decoded.
#[derive(Debug)]
pub enum DecodeError {
    Guard(GuardError),
    Crate {
        api: &'static str,
        version: i16,
        reason: String,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Guard(e) => write!(f, "malformed request body: {e}"),
            DecodeError::Crate {
                api,
                version,
                reason,
            } => write!(f, "cannot decode {api} v{version}: {reason}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Decodes the body of `request` as `T` after the structural guard accepted it.
pub fn decode_body<T: Decodable>(request: &Request) -> Result<T, DecodeError> {
    let version = request.api_version;
    check_request(
        request.spec.key,
        version,
        request.spec.is_flexible(version),
        &request.body,
    )
    .map_err(DecodeError::Guard)?;
    let mut body = request.body.clone();
    T::decode(&mut body, version).map_err(|e| DecodeError::Crate {
        api: request.spec.name,
        version,
        reason: e.to_string(),
    })
}

/// Why a response could not be encoded (a bug in the handler: it set a field the version lacks).
#[derive(Debug)]
pub struct EncodeError {
    pub api: &'static str,
    pub version: i16,
    pub reason: String,
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot encode {} v{} response: {}",
            self.api, self.version, self.reason
        )
    }
}

impl std::error::Error for EncodeError {}

/// Encodes a response frame: size prefix, response header, body.
pub fn encode_response<T: Encodable>(
    spec: &ApiSpec,
    version: i16,
    correlation_id: i32,
    body: &T,
) -> Result<Bytes, EncodeError> {
    let err = |e: &dyn fmt::Display| EncodeError {
        api: spec.name,
        version,
        reason: e.to_string(),
    };
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    let header_version = spec.response_header_version(version);
    let size = header.compute_size(header_version).map_err(|e| err(&e))?
        + body.compute_size(version).map_err(|e| err(&e))?;
    let mut out = BytesMut::with_capacity(SIZE_PREFIX_BYTES + size);
    out.put_i32(i32::try_from(size).map_err(|_| EncodeError {
        api: spec.name,
        version,
        reason: format!("response of {size} bytes is too large"),
    })?);
    header
        .encode(&mut out, header_version)
        .map_err(|e| err(&e))?;
    body.encode(&mut out, version).map_err(|e| err(&e))?;
    assert_eq!(
        out.len(),
        SIZE_PREFIX_BYTES + size,
        "compute_size disagrees with encode"
    );
    Ok(out.freeze())
}

/// The frame answering an ApiVersions request of an unserved version (v0 body, header v0).
pub fn encode_api_versions_unsupported(correlation_id: i32) -> Bytes {
    let spec = api_spec(API_VERSIONS).expect("ApiVersions is served");
    encode_response(
        spec,
        0,
        correlation_id,
        &super::apis::api_versions_unsupported_response(),
    )
    .expect("the v0 ApiVersions error body always encodes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::apis::{METADATA, SHARE_BEGIN_TRANSACTION};
    use crate::protocol::share_txn::{ShareBeginTransactionRequest, ShareBeginTransactionResponse};
    use crate::share_txn::TxnState;
    use kafka_protocol::messages::{ApiVersionsResponse, MetadataRequest};
    use kafka_protocol::protocol::StrBytes;

    fn request_frame(api_key: i16, version: i16, header_version: i16, body: &[u8]) -> Bytes {
        let mut header = RequestHeader::default();
        header.request_api_key = api_key;
        header.request_api_version = version;
        header.correlation_id = 77;
        header.client_id = Some(StrBytes::from_static_str("tester"));
        let mut buf = BytesMut::new();
        header.encode(&mut buf, header_version).unwrap();
        buf.extend_from_slice(body);
        buf.freeze()
    }

    #[test]
    fn served_request_is_parsed_and_decoded() {
        let mut body = BytesMut::new();
        MetadataRequest::default().encode(&mut body, 12).unwrap();
        let Inbound::Request(request) = parse_frame(request_frame(METADATA, 12, 2, &body)) else {
            panic!("expected a request");
        };
        assert_eq!(request.correlation_id, 77);
        assert_eq!(request.client_id.as_deref(), Some("tester"));
        let decoded: MetadataRequest = decode_body(&request).unwrap();
        assert_eq!(decoded, MetadataRequest::default());
    }

    #[test]
    fn unknown_keys_and_versions_are_rejected() {
        assert!(matches!(
            parse_frame(request_frame(METADATA, 99, 1, &[])),
            Inbound::Unsupported {
                api_version: 99,
                ..
            }
        ));
        // A Kafka API key the broker does not serve (LeaderAndIsr, 4): answered like an unknown key.
        assert!(matches!(
            parse_frame(request_frame(4, 7, 2, &[])),
            Inbound::Unsupported { api_key: 4, .. }
        ));
        let mut frame = BytesMut::new();
        frame.put_i16(777);
        frame.put_i16(0);
        frame.put_i32(5);
        assert!(matches!(
            parse_frame(frame.freeze()),
            Inbound::Unsupported {
                api_key: 777,
                api_version: 0,
                correlation_id: 5
            }
        ));
        assert!(matches!(
            parse_frame(Bytes::from_static(&[0, 3, 0])),
            Inbound::Reject(Reject::ShortHeader { bytes: 3 })
        ));
    }

    #[test]
    fn api_versions_of_a_future_version_gets_the_v0_error_body() {
        let frame = request_frame(API_VERSIONS, 9, 2, &[0, 0, 0]);
        let Inbound::Unsupported {
            api_key,
            api_version,
            correlation_id,
        } = parse_frame(frame)
        else {
            panic!("expected the unsupported-version path");
        };
        let response = Inbound::unsupported_frame(api_key, api_version, correlation_id);
        let size = i32::from_be_bytes([response[0], response[1], response[2], response[3]]);
        assert_eq!(size as usize, response.len() - 4);
        assert_eq!(&response[4..8], &77i32.to_be_bytes());
        let mut body = response.slice(8..);
        let decoded = ApiVersionsResponse::decode(&mut body, 0).unwrap();
        assert_eq!(decoded.error_code, 35);
        assert!(!decoded.api_keys.is_empty());
    }

    /// A table holding the project's key 1000, built here: the path a served share-transaction
    /// request will take once its handler exists and it joins `SUPPORTED_APIS`.
    static SHARE_TABLE: [ApiSpec; 2] = [
        ApiSpec {
            key: API_VERSIONS,
            name: "ApiVersions",
            min_version: 0,
            max_version: 4,
            flexible_min: 3,
        },
        ApiSpec {
            key: SHARE_BEGIN_TRANSACTION,
            name: "ShareBeginTransaction",
            min_version: 0,
            max_version: 0,
            flexible_min: 0,
        },
    ];

    #[test]
    fn project_keys_parse_decode_and_encode_without_the_crate_knowing_them() {
        assert!(kafka_protocol::messages::ApiKey::try_from(SHARE_BEGIN_TRANSACTION).is_err());
        let spec = &SHARE_TABLE[1];
        assert_eq!(spec.request_header_version(0), 2);
        assert_eq!(spec.response_header_version(0), 1);

        let sent = ShareBeginTransactionRequest {
            group_id: "g".into(),
            transaction_id: "g-p-1".into(),
            timeout_ms: -1,
        };
        let mut body = BytesMut::new();
        sent.encode(&mut body, 0).unwrap();
        // Header v2: key, version, correlation id, client id (INT16-length string), no tags.
        let frame = request_frame(SHARE_BEGIN_TRANSACTION, 0, 2, &body);
        assert_eq!(&frame[0..2], &1000i16.to_be_bytes());
        assert_eq!(
            frame[frame.len() - body.len() - 1],
            0,
            "header tagged fields"
        );

        // Served by the real table too.
        assert!(matches!(parse_frame(frame.clone()), Inbound::Request(_)));
        let Inbound::Request(request) = parse_frame_in(&SHARE_TABLE, frame) else {
            panic!("expected a request");
        };
        assert_eq!(request.client_id.as_deref(), Some("tester"));
        assert_eq!(request.body.len(), body.len());
        let decoded: ShareBeginTransactionRequest = decode_body(&request).unwrap();
        assert_eq!(decoded, sent);

        // Version 1 does not exist.
        assert!(matches!(
            parse_frame_in(
                &SHARE_TABLE,
                request_frame(SHARE_BEGIN_TRANSACTION, 1, 2, &body)
            ),
            Inbound::Unsupported { api_version: 1, .. }
        ));

        // The guard runs for the project's keys too.
        let mut hostile = BytesMut::new();
        hostile.extend_from_slice(&[0x02, b'g', 0x02, b't']);
        hostile.extend_from_slice(&[0; 8]);
        hostile.extend_from_slice(&[0x01, 0x05, 0xff, 0xff, 0x03]); // tagged field of 64 KiB
        let Inbound::Request(request) = parse_frame_in(
            &SHARE_TABLE,
            request_frame(SHARE_BEGIN_TRANSACTION, 0, 2, &hostile),
        ) else {
            panic!("header is fine");
        };
        assert!(matches!(
            decode_body::<ShareBeginTransactionRequest>(&request),
            Err(DecodeError::Guard(GuardError::Truncated { .. }))
        ));

        // Response: size prefix, header v1 (correlation id + empty tagged fields), body.
        let response = ShareBeginTransactionResponse {
            transaction_state: TxnState::Ongoing.into(),
            timeout_ms: 30_000,
            ..Default::default()
        };
        let frame = encode_response(spec, 0, 77, &response).unwrap();
        let size = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
        assert_eq!(size as usize, frame.len() - 4);
        assert_eq!(&frame[4..8], &77i32.to_be_bytes());
        assert_eq!(frame[8], 0, "response header v1 tagged fields");
        let mut body = frame.slice(9..);
        assert_eq!(
            ShareBeginTransactionResponse::decode(&mut body, 0).unwrap(),
            response
        );
        assert!(body.is_empty());
    }

    #[test]
    fn hostile_body_is_refused_by_the_guard() {
        let frame = request_frame(METADATA, 1, 1, &i32::MAX.to_be_bytes());
        let Inbound::Request(request) = parse_frame(frame) else {
            panic!("header is fine");
        };
        assert!(matches!(
            decode_body::<MetadataRequest>(&request),
            Err(DecodeError::Guard(GuardError::ArrayTooLong { .. }))
        ));
    }
}
