//! DescribeUserScramCredentials (key 50) and AlterUserScramCredentials (key 51), and the
//! answer to SaslHandshake / SaslAuthenticate once a connection is past authentication (or on
//! a listener without SASL): ILLEGAL_SASL_STATE, as Kafka's `KafkaApis` answers them.
//!
//! Also DescribeClientQuotas (key 48): Lockstep enforces no client quotas, so the answer to a
//! valid filter is always "no entities" (what Kafka answers when none are configured).
//!
//! The credentials are the broker's one [`super::CredentialAdmin`] (the runtime's, shared by
//! every shard and persisted before an alteration is acknowledged); the rules are
//! `scram::ScramCredentials::alter` / `describe`.

use super::{decode_counted, respond, Bus, Outcome};
use crate::constants::SCRAM_REQUEST_USERS_MAX;
use crate::protocol::codec::Request;
use crate::security::sasl::ILLEGAL_SASL_STATE;
use crate::security::scram::Upsertion;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
    SaslAuthenticateResponse, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;

/// Kafka's error for a request the broker cannot serve right now (no credential store).
const UNKNOWN_SERVER_ERROR: i16 = -1;

/// SaslHandshake after authentication, or on a listener without SASL.
pub fn handle_sasl_handshake_late(request: &Request) -> Outcome {
    respond(
        request,
        &SaslHandshakeResponse::default().with_error_code(ILLEGAL_SASL_STATE),
    )
}

/// SaslAuthenticate after authentication, or on a listener without SASL.
pub fn handle_sasl_authenticate_late(request: &Request) -> Outcome {
    respond(
        request,
        &SaslAuthenticateResponse::default()
            .with_error_code(ILLEGAL_SASL_STATE)
            .with_error_message(Some(StrBytes::from_static_str(
                "Unexpected SaslAuthenticate request: the connection is not authenticating",
            ))),
    )
}

/// Kafka's INVALID_REQUEST.
const INVALID_REQUEST: i16 = 42;

/// DescribeClientQuotas: the filter is validated as Kafka does (match type 0 EXACT needs a
/// name, 1 DEFAULT none, 2 SPECIFIED none; an entity type at most once); no quotas exist.
pub fn handle_describe_client_quotas(request: &Request) -> Outcome {
    use kafka_protocol::messages::{DescribeClientQuotasRequest, DescribeClientQuotasResponse};
    let decoded: DescribeClientQuotasRequest = match decode_counted(
        request,
        "components",
        SCRAM_REQUEST_USERS_MAX,
        |r: &DescribeClientQuotasRequest| r.components.len(),
    ) {
        Ok(d) => d,
        Err(outcome) => return outcome,
    };
    let mut seen = std::collections::BTreeSet::new();
    let invalid = decoded.components.iter().find_map(|c| {
        if !seen.insert(c.entity_type.as_str()) {
            return Some(format!("Duplicate {} entity type", c.entity_type));
        }
        match (c.match_type, &c._match) {
            (0, Some(_)) | (1, None) | (2, None) => None,
            (0, None) => Some("Unexpected null match for exact match type".to_string()),
            (1 | 2, Some(_)) => Some("Unexpected match for non-exact match type".to_string()),
            (t, _) => Some(format!("Unexpected match type {t}")),
        }
    });
    let body = match invalid {
        Some(message) => DescribeClientQuotasResponse::default()
            .with_error_code(INVALID_REQUEST)
            .with_error_message(Some(StrBytes::from_string(message))),
        None => DescribeClientQuotasResponse::default().with_entries(Some(Vec::new())),
    };
    respond(request, &body)
}

pub fn handle_describe<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded: DescribeUserScramCredentialsRequest = match decode_counted(
        request,
        "users",
        SCRAM_REQUEST_USERS_MAX,
        |r: &DescribeUserScramCredentialsRequest| r.users.as_ref().map_or(0, Vec::len),
    ) {
        Ok(d) => d,
        Err(outcome) => return outcome,
    };
    let Some(store) = bus.credentials() else {
        return respond(
            request,
            &DescribeUserScramCredentialsResponse::default()
                .with_error_code(UNKNOWN_SERVER_ERROR)
                .with_error_message(Some(StrBytes::from_static_str(
                    "this broker keeps no SCRAM credentials",
                ))),
        );
    };
    let names: Option<Vec<String>> = decoded
        .users
        .map(|users| users.into_iter().map(|u| u.name.to_string()).collect());
    let results = store
        .snapshot()
        .describe(names.as_deref())
        .into_iter()
        .map(|r| {
            DescribeUserScramCredentialsResult::default()
                .with_user(StrBytes::from_string(r.user))
                .with_error_code(r.error)
                .with_error_message(r.message.map(StrBytes::from_string))
                .with_credential_infos(
                    r.credentials
                        .into_iter()
                        .map(|(mechanism, iterations)| {
                            CredentialInfo::default()
                                .with_mechanism(mechanism)
                                .with_iterations(iterations)
                        })
                        .collect(),
                )
        })
        .collect();
    respond(
        request,
        &DescribeUserScramCredentialsResponse::default().with_results(results),
    )
}

pub fn handle_alter<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded: AlterUserScramCredentialsRequest = match decode_counted(
        request,
        "credentials",
        SCRAM_REQUEST_USERS_MAX,
        |r: &AlterUserScramCredentialsRequest| r.deletions.len() + r.upsertions.len(),
    ) {
        Ok(d) => d,
        Err(outcome) => return outcome,
    };
    let deletions: Vec<(String, i8)> = decoded
        .deletions
        .iter()
        .map(|d| (d.name.to_string(), d.mechanism))
        .collect();
    let upsertions: Vec<Upsertion> = decoded
        .upsertions
        .iter()
        .map(|u| Upsertion {
            user: u.name.to_string(),
            mechanism: u.mechanism,
            iterations: u.iterations,
            salt: u.salt.to_vec(),
            salted_password: u.salted_password.to_vec(),
        })
        .collect();
    let every_user_fails = |message: String| -> Vec<AlterUserScramCredentialsResult> {
        let mut users: Vec<&String> = deletions
            .iter()
            .map(|(u, _)| u)
            .chain(upsertions.iter().map(|u| &u.user))
            .collect();
        users.sort();
        users.dedup();
        users
            .into_iter()
            .map(|u| {
                AlterUserScramCredentialsResult::default()
                    .with_user(StrBytes::from_string(u.clone()))
                    .with_error_code(UNKNOWN_SERVER_ERROR)
                    .with_error_message(Some(StrBytes::from_string(message.clone())))
            })
            .collect()
    };
    let results = match bus.credentials() {
        None => every_user_fails("this broker keeps no SCRAM credentials".to_string()),
        Some(store) => {
            let mut outcome = Vec::new();
            let saved = store.update(&mut |creds| outcome = creds.alter(&deletions, &upsertions));
            match saved {
                Ok(()) => outcome
                    .into_iter()
                    .map(|r| {
                        AlterUserScramCredentialsResult::default()
                            .with_user(StrBytes::from_string(r.user))
                            .with_error_code(r.error)
                            .with_error_message(r.message.map(StrBytes::from_string))
                    })
                    .collect(),
                Err(reason) => {
                    tracing::error!(%reason, "SCRAM credentials not saved; nothing changed");
                    every_user_fails(format!("credentials not saved: {reason}"))
                }
            }
        }
    };
    respond(
        request,
        &AlterUserScramCredentialsResponse::default().with_results(results),
    )
}
