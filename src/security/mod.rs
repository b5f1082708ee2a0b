//! Who a client is and what it may do: the SASL exchange ([`sasl`]: PLAIN and SCRAM,
//! [`scram`]: SCRAM-SHA-256/512 and the credential store's format), Kafka's ACL model
//! ([`authz`]: StandardAuthorizer's rules, pure), and the broker-wide connection limits
//! ([`conn_limits`]). All of it is synchronous and I/O-free; the TLS listeners and the SCRAM
//! credentials file, which need the runtime, are `runtime::tls` and `runtime::credentials`, and
//! the per-API authorization hook is `server::authorize`.

pub mod authz;
pub mod conn_limits;
pub mod sasl;
pub mod scram;
