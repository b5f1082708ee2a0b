//! CreateAcls (30), DescribeAcls (29), DeleteAcls (31), versions 1–3 as in Kafka 4.4.
//!
//! ACLs live in the topic registry (`registry::TopicRegistry::acls`): CreateAcls and DeleteAcls
//! go to the metadata controller (shard 0) as `AdminOp`s, which persists the registry
//! (`metadata.json`) and installs it on every shard before answering, so an ACL acknowledged to
//! the client is durable and every shard authorizes with it. DescribeAcls reads the local
//! shard's snapshot.
//!
//! Without an authorizer (`authorizer.class.name` unset) the three answer SECURITY_DISABLED,
//! as Kafka does. Who may call them (CLUSTER ALTER / DESCRIBE) is checked by `authorize`.
//! An ACL or filter with a value outside Kafka's model answers INVALID_REQUEST for that item.

use super::admin::call_controller;
use super::{respond, Bus, ConnInfo, Outcome};
use crate::constants::REQUEST_ENTITIES_MAX;
use crate::protocol::codec::{decode_body, Request};
use crate::security::authz::{AclBinding, AclFilter};
use crate::shard::call::{CreateAcls, DeleteAcls};
use crate::shard::ops::{AdminError, CallError};
use kafka_protocol::messages::{
    create_acls_response, delete_acls_response, describe_acls_response, CreateAclsRequest,
    CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse, DescribeAclsRequest,
    DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::BTreeMap;

/// Kafka's resource types DELEGATION_TOKEN (6) and USER (7): filters may name them (nothing
/// matches: this broker keeps no ACLs of those types), ACLs may not.
const UNSUPPORTED_FILTER_TYPES: [i8; 2] = [6, 7];

fn sb(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

const SECURITY_DISABLED_MESSAGE: &str = "No Authorizer is configured.";

/// Why an ACL or filter was refused, and the message the wire carries.
type Refusal = (AdminError, String);

fn security_disabled() -> Refusal {
    (
        AdminError::SecurityDisabled,
        SECURITY_DISABLED_MESSAGE.to_string(),
    )
}

/// The controller answered with a reply of another length.
fn unexpected_reply() -> Refusal {
    (
        AdminError::Call(CallError::UnexpectedReply(
            "a controller reply of another length".into(),
        )),
        "unexpected controller reply".to_string(),
    )
}

fn controller_failed(failure: CallError) -> Refusal {
    (
        AdminError::Call(failure),
        "the metadata controller failed".to_string(),
    )
}

/// CreateAcls v1–3.
pub async fn handle_create_acls<B: Bus>(bus: &B, conn: &ConnInfo, request: &Request) -> Outcome {
    let decoded = match super::decode_counted(
        request,
        "ACL creations",
        REQUEST_ENTITIES_MAX,
        |d: &CreateAclsRequest| d.creations.len(),
    ) {
        Ok(d) => d,
        Err(refused) => return refused,
    };
    let mut results: Vec<Result<(), Refusal>> = Vec::with_capacity(decoded.creations.len());
    if conn.authorizer.is_none() {
        results.extend(decoded.creations.iter().map(|_| Err(security_disabled())));
    } else {
        // Valid ACLs go to the controller in one operation; invalid ones are answered here.
        let parsed: Vec<Result<AclBinding, String>> = decoded
            .creations
            .iter()
            .map(|c| {
                AclBinding::from_wire(
                    c.resource_type,
                    &c.resource_name,
                    c.resource_pattern_type,
                    &c.principal,
                    &c.host,
                    c.operation,
                    c.permission_type,
                )
                .map_err(|e| e.to_string())
            })
            .collect();
        let valid: Vec<AclBinding> = parsed.iter().filter_map(|p| p.clone().ok()).collect();
        let mut created = if valid.is_empty() {
            Vec::new()
        } else {
            match call_controller(bus, CreateAcls(valid.clone())).await {
                Ok(r) if r.len() == valid.len() => r,
                Ok(_) => vec![Err(unexpected_reply()); valid.len()],
                Err(failure) => vec![Err(controller_failed(failure)); valid.len()],
            }
        }
        .into_iter();
        for p in parsed {
            results.push(match p {
                Ok(_) => created.next().expect("one reply per valid ACL"),
                Err(reason) => Err((AdminError::InvalidAcl, reason)),
            });
        }
    }
    let mut response = CreateAclsResponse::default();
    response.results = results
        .into_iter()
        .map(|r| {
            let mut out = create_acls_response::AclCreationResult::default();
            if let Err((error, message)) = r {
                out.error_code = error.code();
                out.error_message = Some(sb(&message));
            }
            out
        })
        .collect();
    respond(request, &response)
}

/// DescribeAcls v1–3: the ACLs matching the filter, grouped by resource pattern.
pub async fn handle_describe_acls<B: Bus>(bus: &B, conn: &ConnInfo, request: &Request) -> Outcome {
    let d: DescribeAclsRequest = match decode_body(request) {
        Ok(d) => d,
        Err(e) => return Outcome::Close(e.to_string()),
    };
    let mut response = DescribeAclsResponse::default();
    if conn.authorizer.is_none() {
        response.error_code = ResponseError::SecurityDisabled.code();
        response.error_message = Some(sb(SECURITY_DISABLED_MESSAGE));
        return respond(request, &response);
    }
    if UNSUPPORTED_FILTER_TYPES.contains(&d.resource_type_filter) {
        return respond(request, &response);
    }
    let filter = match AclFilter::from_wire(
        d.resource_type_filter,
        d.resource_name_filter.as_deref(),
        d.pattern_type_filter,
        d.principal_filter.as_deref(),
        d.host_filter.as_deref(),
        d.operation,
        d.permission_type,
    ) {
        Ok(f) => f,
        Err(e) => {
            response.error_code = ResponseError::InvalidRequest.code();
            response.error_message = Some(sb(&e.to_string()));
            return respond(request, &response);
        }
    };
    let registry = bus.registry();
    let mut grouped: BTreeMap<(i8, String, i8), Vec<describe_acls_response::AclDescription>> =
        BTreeMap::new();
    for acl in registry.acls.iter().filter(|a| filter.matches(a)) {
        let mut desc = describe_acls_response::AclDescription::default();
        desc.principal = sb(&acl.principal);
        desc.host = sb(&acl.host);
        desc.operation = acl.operation.code();
        desc.permission_type = acl.permission.code();
        grouped
            .entry((
                acl.resource_type.code(),
                acl.resource_name.clone(),
                acl.pattern_type.code(),
            ))
            .or_default()
            .push(desc);
    }
    response.resources = grouped
        .into_iter()
        .map(|((resource_type, name, pattern_type), acls)| {
            let mut r = describe_acls_response::DescribeAclsResource::default();
            r.resource_type = resource_type;
            r.resource_name = sb(&name);
            r.pattern_type = pattern_type;
            r.acls = acls;
            r
        })
        .collect();
    respond(request, &response)
}

/// DeleteAcls v1–3: per filter, the ACLs it matched and removed.
pub async fn handle_delete_acls<B: Bus>(bus: &B, conn: &ConnInfo, request: &Request) -> Outcome {
    let decoded = match super::decode_counted(
        request,
        "ACL filters",
        REQUEST_ENTITIES_MAX,
        |d: &DeleteAclsRequest| d.filters.len(),
    ) {
        Ok(d) => d,
        Err(refused) => return refused,
    };
    let results: Vec<Result<Vec<AclBinding>, Refusal>> = if conn.authorizer.is_none() {
        decoded
            .filters
            .iter()
            .map(|_| Err(security_disabled()))
            .collect()
    } else {
        // `None`: a filter that matches nothing here (DELEGATION_TOKEN / USER types).
        let parsed: Vec<Result<Option<AclFilter>, String>> = decoded
            .filters
            .iter()
            .map(|f| {
                if UNSUPPORTED_FILTER_TYPES.contains(&f.resource_type_filter) {
                    return Ok(None);
                }
                AclFilter::from_wire(
                    f.resource_type_filter,
                    f.resource_name_filter.as_deref(),
                    f.pattern_type_filter,
                    f.principal_filter.as_deref(),
                    f.host_filter.as_deref(),
                    f.operation,
                    f.permission_type,
                )
                .map(Some)
                .map_err(|e| e.to_string())
            })
            .collect();
        let valid: Vec<AclFilter> = parsed
            .iter()
            .filter_map(|p| p.clone().ok().flatten())
            .collect();
        let mut deleted = if valid.is_empty() {
            Vec::new()
        } else {
            match call_controller(bus, DeleteAcls(valid.clone())).await {
                Ok(r) if r.len() == valid.len() => r,
                Ok(_) => vec![Err(unexpected_reply()); valid.len()],
                Err(failure) => vec![Err(controller_failed(failure)); valid.len()],
            }
        }
        .into_iter();
        parsed
            .into_iter()
            .map(|p| match p {
                Ok(Some(_)) => deleted.next().expect("one reply per valid filter"),
                Ok(None) => Ok(Vec::new()),
                Err(reason) => Err((AdminError::InvalidAcl, reason)),
            })
            .collect()
    };
    let mut response = DeleteAclsResponse::default();
    response.filter_results = results
        .into_iter()
        .map(|r| {
            let mut out = delete_acls_response::DeleteAclsFilterResult::default();
            match r {
                Ok(acls) => {
                    out.matching_acls = acls
                        .iter()
                        .map(|acl| {
                            let mut m = delete_acls_response::DeleteAclsMatchingAcl::default();
                            m.resource_type = acl.resource_type.code();
                            m.resource_name = sb(&acl.resource_name);
                            m.pattern_type = acl.pattern_type.code();
                            m.principal = sb(&acl.principal);
                            m.host = sb(&acl.host);
                            m.operation = acl.operation.code();
                            m.permission_type = acl.permission.code();
                            m
                        })
                        .collect()
                }
                Err((error, message)) => {
                    out.error_code = error.code();
                    out.error_message = Some(sb(&message));
                }
            }
            out
        })
        .collect();
    respond(request, &response)
}
