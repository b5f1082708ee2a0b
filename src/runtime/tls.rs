//! TLS of the SSL and SASL_SSL listeners: the rustls server configuration built once from the
//! PEM settings (`config_file::TlsSettings`), and the principal of a client certificate.
//!
//! The principal is the certificate's subject as Java's `X500Principal.getName()` writes it
//! (RFC 2253: last RDN first, `CN=client,O=Example`), which is Kafka's default
//! `ssl.principal.mapping.rules`; the subject is read by a small DER walk (no X.509 crate).

use crate::config::file::{ClientAuth, TlsSettings};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;

/// The server configuration of every TLS listener; `Err` names what is wrong with the PEMs.
pub fn server_config(settings: &TlsSettings) -> Result<Arc<rustls::ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain_pem = normalize_pem(&settings.certificate_chain_pem);
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("ssl.keystore certificate chain: {e}"))?;
    if chain.is_empty() {
        return Err("ssl.keystore: no certificate".to_string());
    }
    let key_pem = normalize_pem(&settings.private_key_pem);
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| {
        format!("ssl.keystore: no unencrypted private key (PKCS#8, PKCS#1 or SEC1): {e}")
    })?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match (settings.client_auth, &settings.truststore_pem) {
        (ClientAuth::None, _) => builder.with_no_client_auth(),
        (_, None) => return Err("ssl.client.auth needs ssl.truststore.location".to_string()),
        (auth, Some(trust)) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(normalize_pem(trust).as_bytes()) {
                let cert = cert.map_err(|e| format!("ssl.truststore: {e}"))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("ssl.truststore: {e}"))?;
            }
            if roots.is_empty() {
                return Err("ssl.truststore: no certificate".to_string());
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            );
            let verifier = match auth {
                ClientAuth::Requested => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| e.to_string())?)
        }
    };
    let config = builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("ssl.keystore: {e}"))?;
    Ok(Arc::new(config))
}

/// Rewrites PEM sections into the one-line-per-64-characters form, so that Kafka's inline form
/// (a whole certificate on one properties line) parses too.
fn normalize_pem(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("-----BEGIN ") {
        let after = &rest[start + "-----BEGIN ".len()..];
        let Some(label_end) = after.find("-----") else {
            break;
        };
        let label = &after[..label_end];
        let body = &after[label_end + 5..];
        let end_marker = format!("-----END {label}-----");
        let Some(body_end) = body.find(&end_marker) else {
            break;
        };
        let base64: Vec<char> = body[..body_end]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        out.push_str(&format!("-----BEGIN {label}-----\n"));
        for line in base64.chunks(64) {
            out.extend(line);
            out.push('\n');
        }
        out.push_str(&end_marker);
        out.push('\n');
        rest = &body[body_end + end_marker.len()..];
    }
    out
}

/// One DER element: (tag, content, rest after it).
fn der(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;

/// `User:` + the subject of a DER certificate (RFC 2253), or `None` if it does not parse.
pub fn principal_of_certificate(cert: &[u8]) -> Option<String> {
    Some(format!("User:{}", subject_rfc2253(cert)?))
}

fn subject_rfc2253(cert: &[u8]) -> Option<String> {
    let (SEQUENCE, certificate, _) = der(cert)? else {
        return None;
    };
    let (SEQUENCE, mut tbs, _) = der(certificate)? else {
        return None;
    };
    if tbs.first() == Some(&0xa0) {
        tbs = der(tbs)?.2; // explicit version
    }
    // serialNumber, signature, issuer, validity, then the subject.
    for _ in 0..4 {
        tbs = der(tbs)?.2;
    }
    let (SEQUENCE, mut name, _) = der(tbs)? else {
        return None;
    };
    let mut rdns = Vec::new();
    while !name.is_empty() {
        let (SET, mut set, rest) = der(name)? else {
            return None;
        };
        name = rest;
        let mut attrs = Vec::new();
        while !set.is_empty() {
            let (SEQUENCE, attr, rest) = der(set)? else {
                return None;
            };
            set = rest;
            let (0x06, oid, value) = der(attr)? else {
                return None;
            };
            let (tag, content, _) = der(value)?;
            let oid = oid_string(oid)?;
            let text = match keyword(&oid) {
                Some(k) => match string_value(tag, content) {
                    Some(s) => format!("{k}={}", escape_rfc2253(&s)),
                    None => format!("{k}=#{}", hex(value)),
                },
                None => format!("{oid}=#{}", hex(value)),
            };
            attrs.push(text);
        }
        rdns.push(attrs.join("+"));
    }
    rdns.reverse();
    Some(rdns.join(","))
}

fn oid_string(bytes: &[u8]) -> Option<String> {
    let mut arcs: Vec<u64> = Vec::new();
    let mut value: u64 = 0;
    for &b in bytes {
        value = value.checked_mul(128)? | (b & 0x7f) as u64;
        if b & 0x80 == 0 {
            if arcs.is_empty() {
                let first = (value / 40).min(2);
                arcs.push(first);
                arcs.push(value - first * 40);
            } else {
                arcs.push(value);
            }
            value = 0;
        }
    }
    let parts: Vec<String> = arcs.iter().map(u64::to_string).collect();
    (!parts.is_empty()).then(|| parts.join("."))
}

/// The keywords Java's RFC 2253 output uses.
fn keyword(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

fn string_value(tag: u8, content: &[u8]) -> Option<String> {
    match tag {
        0x0c | 0x13 | 0x16 => String::from_utf8(content.to_vec()).ok(),
        0x14 => Some(content.iter().map(|&b| b as char).collect()),
        0x1e => {
            let units: Vec<u16> = content
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    }
}

fn escape_rfc2253(value: &str) -> String {
    let mut out = String::new();
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        if content.len() < 128 {
            out.push(content.len() as u8);
        } else {
            out.push(0x82);
            out.extend((content.len() as u16).to_be_bytes());
        }
        out.extend(content);
        out
    }

    fn attr(oid: &[u8], tag: u8, value: &str) -> Vec<u8> {
        tlv(
            SEQUENCE,
            &[tlv(0x06, oid), tlv(tag, value.as_bytes())].concat(),
        )
    }

    #[test]
    fn subject_in_rfc2253_order_with_escapes() {
        let name = tlv(
            SEQUENCE,
            &[
                tlv(SET, &attr(&[0x55, 0x04, 0x06], 0x13, "US")),
                tlv(SET, &attr(&[0x55, 0x04, 0x0a], 0x0c, "Acme, Inc")),
                tlv(
                    SET,
                    &[
                        attr(&[0x55, 0x04, 0x03], 0x0c, "client"),
                        attr(&[0x55, 0x04, 0x2a], 0x0c, "x"),
                    ]
                    .concat(),
                ),
            ]
            .concat(),
        );
        let filler = tlv(SEQUENCE, &[]);
        let tbs = tlv(
            SEQUENCE,
            &[
                tlv(0xa0, &tlv(0x02, &[2])),
                tlv(0x02, &[1]),
                filler.clone(),
                filler.clone(),
                filler.clone(),
                name,
                vec![0u8; 200],
            ]
            .concat(),
        );
        let cert = tlv(SEQUENCE, &tbs);
        assert_eq!(
            principal_of_certificate(&cert).unwrap(),
            "User:CN=client+2.5.4.42=#0c0178,O=Acme\\, Inc,C=US"
        );
        assert_eq!(principal_of_certificate(&cert[..10]), None);
        assert_eq!(principal_of_certificate(&[]), None);
    }

    #[test]
    fn inline_pem_is_reflowed() {
        let one_line = "-----BEGIN CERTIFICATE----- QUJD REVG -----END CERTIFICATE-----";
        assert_eq!(
            normalize_pem(one_line),
            "-----BEGIN CERTIFICATE-----\nQUJDREVG\n-----END CERTIFICATE-----\n"
        );
    }
}
