//! ApiVersions v0–4: what this broker serves (the table in `protocol::apis`).
//!
//! An unsupported ApiVersions version never reaches this handler: the codec answers it with
//! the v0-format UNSUPPORTED_VERSION body before dispatch.

use super::{respond, Outcome};
use crate::protocol::apis::api_versions_response;
use crate::protocol::codec::{decode_body, Request};
use kafka_protocol::messages::ApiVersionsRequest;
use kafka_protocol::ResponseError;

/// Kafka's rule for client software names and versions (v3+): `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?`.
pub fn valid_software_field(text: &str) -> bool {
    let bytes = text.as_bytes();
    let edge_ok = |b: &u8| b.is_ascii_alphanumeric();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            edge_ok(first)
                && edge_ok(last)
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'.')
        }
        _ => false,
    }
}

/// Answers ApiVersions.
pub fn handle(request: &Request) -> Outcome {
    let decoded: ApiVersionsRequest = match decode_body(request) {
        Ok(r) => r,
        Err(e) => return Outcome::Close(e.to_string()),
    };
    let mut response = api_versions_response();
    if request.api_version >= 3
        && !(valid_software_field(&decoded.client_software_name)
            && valid_software_field(&decoded.client_software_version))
    {
        response.error_code = ResponseError::InvalidRequest.code();
    }
    respond(request, &response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn software_fields_follow_kafkas_pattern() {
        for good in ["librdkafka", "apache-kafka-java", "2.16.0", "a", "x-1.y"] {
            assert!(valid_software_field(good), "{good}");
        }
        for bad in ["", "-a", "a-", ".", "a b", "ü"] {
            assert!(!valid_software_field(bad), "{bad}");
        }
    }
}
