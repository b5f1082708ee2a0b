//! DescribeConfigs v1–4 for topics and the broker, answered from the local registry snapshot.
//!
//! Each entry reports the effective value and where it came from (topic override, dynamic
//! broker default, static default); with `include_synonyms`, the whole chain is listed, most
//! specific first, as Kafka does.

use super::admin::{RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC};
use super::{respond, Bus, Outcome};
use crate::config::{
    broker_config_def, effective_broker_value, effective_topic_value, ConfigDef, ConfigSource,
    BROKER_CONFIGS, GROUP_CONFIGS, TOPIC_CONFIGS,
};
use crate::constants::BROKER_NODE_ID;
use crate::protocol::codec::{decode_body, Request};
use crate::shard::registry::TopicRegistry;
use kafka_protocol::messages::{
    describe_configs_response, DescribeConfigsRequest, DescribeConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::BTreeMap;

fn sb(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn synonym(
    name: &str,
    value: &str,
    source: ConfigSource,
) -> describe_configs_response::DescribeConfigsSynonym {
    let mut s = describe_configs_response::DescribeConfigsSynonym::default();
    s.name = sb(name);
    s.value = Some(sb(value));
    s.source = source as i8;
    s
}

fn entry(
    def: &ConfigDef,
    value: String,
    source: ConfigSource,
    synonyms: Vec<describe_configs_response::DescribeConfigsSynonym>,
    version: i16,
    include_documentation: bool,
) -> describe_configs_response::DescribeConfigsResourceResult {
    let mut e = describe_configs_response::DescribeConfigsResourceResult::default();
    e.name = sb(def.name);
    e.value = Some(sb(&value));
    e.read_only = def.is_read_only();
    e.config_source = source as i8;
    e.is_sensitive = false;
    e.synonyms = synonyms;
    if version >= 3 {
        e.config_type = def.config_type as i8;
        if include_documentation {
            e.documentation = Some(sb(def.doc));
        }
    }
    e
}

fn wanted(keys: &Option<Vec<StrBytes>>, name: &str) -> bool {
    keys.as_ref()
        .is_none_or(|keys| keys.iter().any(|k| k.as_str() == name))
}

fn topic_configs(
    topic: &BTreeMap<String, String>,
    broker: &BTreeMap<String, String>,
    keys: &Option<Vec<StrBytes>>,
    include_synonyms: bool,
    version: i16,
    include_documentation: bool,
) -> Vec<describe_configs_response::DescribeConfigsResourceResult> {
    TOPIC_CONFIGS
        .iter()
        .filter(|def| wanted(keys, def.name))
        .map(|def| {
            let (value, source) = effective_topic_value(def, topic, broker);
            let mut synonyms = Vec::new();
            if include_synonyms {
                if let Some(v) = topic.get(def.name) {
                    synonyms.push(synonym(def.name, v, ConfigSource::DynamicTopic));
                }
                if let Some(syn) = def.synonym {
                    if let Some(v) = broker.get(syn) {
                        synonyms.push(synonym(syn, v, ConfigSource::DynamicDefaultBroker));
                    }
                    if let Some(broker_def) = broker_config_def(syn) {
                        synonyms.push(synonym(syn, broker_def.default, ConfigSource::Default));
                    }
                }
            }
            entry(def, value, source, synonyms, version, include_documentation)
        })
        .collect()
}

fn broker_configs(
    broker: &BTreeMap<String, String>,
    keys: &Option<Vec<StrBytes>>,
    include_synonyms: bool,
    version: i16,
    include_documentation: bool,
) -> Vec<describe_configs_response::DescribeConfigsResourceResult> {
    BROKER_CONFIGS
        .iter()
        .filter(|def| wanted(keys, def.name))
        .map(|def| {
            let (value, source) = effective_broker_value(def, broker);
            let mut synonyms = Vec::new();
            if include_synonyms {
                if let Some(v) = broker.get(def.name) {
                    synonyms.push(synonym(def.name, v, ConfigSource::DynamicDefaultBroker));
                }
                synonyms.push(synonym(def.name, def.default, ConfigSource::Default));
            }
            entry(def, value, source, synonyms, version, include_documentation)
        })
        .collect()
}

fn group_configs(
    group: &BTreeMap<String, String>,
    keys: &Option<Vec<StrBytes>>,
    include_synonyms: bool,
    version: i16,
    include_documentation: bool,
) -> Vec<describe_configs_response::DescribeConfigsResourceResult> {
    GROUP_CONFIGS
        .iter()
        .filter(|def| wanted(keys, def.name))
        .map(|def| {
            let (value, source) = match group.get(def.name) {
                Some(v) => (v.clone(), ConfigSource::Group),
                None => (def.default.to_string(), ConfigSource::Default),
            };
            let synonyms = if include_synonyms {
                vec![synonym(def.name, &value, source)]
            } else {
                Vec::new()
            };
            entry(def, value, source, synonyms, version, include_documentation)
        })
        .collect()
}

/// Builds the DescribeConfigs response (pure, for tests).
pub fn describe_configs_response(
    registry: &TopicRegistry,
    request: &DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResponse {
    let include_documentation = version >= 3 && request.include_documentation;
    let mut response = DescribeConfigsResponse::default();
    response.results = request
        .resources
        .iter()
        .map(|resource| {
            let mut result = describe_configs_response::DescribeConfigsResult::default();
            result.resource_type = resource.resource_type;
            result.resource_name = resource.resource_name.clone();
            let name = resource.resource_name.as_str();
            match resource.resource_type {
                RESOURCE_TOPIC => match registry.topic(name) {
                    Some(topic) => {
                        result.configs = topic_configs(
                            &topic.configs,
                            &registry.broker_configs,
                            &resource.configuration_keys,
                            request.include_synonyms,
                            version,
                            include_documentation,
                        )
                    }
                    None => {
                        result.error_code = ResponseError::UnknownTopicOrPartition.code();
                        result.error_message = Some(sb(&format!("unknown topic {name:?}")));
                    }
                },
                RESOURCE_BROKER if name.is_empty() || name == BROKER_NODE_ID.to_string() => {
                    result.configs = broker_configs(
                        &registry.broker_configs,
                        &resource.configuration_keys,
                        request.include_synonyms,
                        version,
                        include_documentation,
                    )
                }
                RESOURCE_GROUP if !name.is_empty() => {
                    let empty = BTreeMap::new();
                    result.configs = group_configs(
                        registry.group_configs.get(name).unwrap_or(&empty),
                        &resource.configuration_keys,
                        request.include_synonyms,
                        version,
                        include_documentation,
                    )
                }
                RESOURCE_BROKER => {
                    result.error_code = ResponseError::InvalidRequest.code();
                    result.error_message = Some(sb(&format!(
                        "unknown broker {name:?} (this broker is {BROKER_NODE_ID})"
                    )));
                }
                other => {
                    result.error_code = ResponseError::InvalidRequest.code();
                    result.error_message = Some(sb(&format!(
                        "config resource type {other} is not supported"
                    )));
                }
            }
            result
        })
        .collect();
    response
}

/// DescribeConfigs v1–4.
pub async fn handle_describe_configs<B: Bus>(bus: &B, request: &Request) -> Outcome {
    let decoded: DescribeConfigsRequest = match decode_body(request) {
        Ok(r) => r,
        Err(e) => return Outcome::Close(e.to_string()),
    };
    if let Err(refused) = super::check_count(
        "config resources",
        decoded.resources.len(),
        crate::constants::REQUEST_ENTITIES_MAX,
    ) {
        return refused;
    }
    let response = describe_configs_response(&bus.registry(), &decoded, request.api_version);
    respond(request, &response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::protocol::{Decodable, Encodable};

    fn request(resources: Vec<(i8, &str, Option<Vec<&str>>)>) -> DescribeConfigsRequest {
        let mut r = DescribeConfigsRequest::default();
        r.include_synonyms = true;
        r.include_documentation = true;
        r.resources = resources
            .into_iter()
            .map(|(t, name, keys)| {
                let mut res = DescribeConfigsResource::default();
                res.resource_type = t;
                res.resource_name = sb(name);
                res.configuration_keys = keys.map(|k| k.into_iter().map(sb).collect());
                res
            })
            .collect();
        r
    }

    #[test]
    fn effective_values_sources_and_synonyms() {
        let mut reg = TopicRegistry::new("c".into());
        reg.create_topic(
            "t",
            uuid::Uuid::from_u128(1),
            1,
            &[("retention.ms".into(), Some("10".into()))],
        )
        .unwrap();
        reg.set_broker_configs([("log.segment.bytes".to_string(), "2097152".to_string())].into())
            .unwrap();
        let req = request(vec![
            (
                RESOURCE_TOPIC,
                "t",
                Some(vec!["retention.ms", "segment.bytes", "unknown"]),
            ),
            (RESOURCE_TOPIC, "missing", None),
            (RESOURCE_BROKER, "0", None),
            (RESOURCE_BROKER, "7", None),
        ]);
        for version in 1..=4 {
            let response = describe_configs_response(&reg, &req, version);
            let mut buf = bytes::BytesMut::new();
            response.encode(&mut buf, version).unwrap();
            let back = DescribeConfigsResponse::decode(&mut buf.freeze(), version).unwrap();
            let codes: Vec<i16> = back.results.iter().map(|r| r.error_code).collect();
            assert_eq!(codes, vec![0, 3, 0, 42], "v{version}");
            let topic = &back.results[0].configs;
            assert_eq!(topic.len(), 2);
            assert_eq!(topic[0].value.as_deref(), Some("10"));
            assert_eq!(topic[0].config_source, ConfigSource::DynamicTopic as i8);
            assert_eq!(topic[0].synonyms.len(), 2);
            assert_eq!(topic[1].value.as_deref(), Some("2097152"));
            assert_eq!(
                topic[1].config_source,
                ConfigSource::DynamicDefaultBroker as i8
            );
            assert_eq!(back.results[2].configs.len(), BROKER_CONFIGS.len());
        }
    }
}
