//! Peer brokers for the suite's comparison (Redis streams, RabbitMQ tx, NATS JetStream), each
//! started on loopback in a temporary directory and driven with the suite's workload shape.
//!
//! PLACEHOLDER (issue 7, branch `suite`): this file only fixes the interface the suite codes
//! against. The peers engineer's `benches/common/peers/{mod,redis,rabbitmq,nats}.rs` replace it at
//! merge; until then every peer reports "not built yet" and the suite skips it with that reason.

use std::time::Duration;

/// The workload shape a peer runs: produce `records` of `record_bytes`, consume them with
/// `consumers` consumers, acknowledging transactionally once per `checkpoint`.
pub struct PeerWorkload {
    pub records: u64,
    pub record_bytes: usize,
    pub consumers: usize,
    pub checkpoint: Duration,
}

/// What a peer measured; `durability` states honestly what its acknowledgement guarantees.
pub struct PeerResult {
    pub name: String,
    pub durability: String,
    pub records: u64,
    pub elapsed: Duration,
    pub produce_us: hdrhistogram::Histogram<u64>,
    pub e2e_us: hdrhistogram::Histogram<u64>,
    pub commit_us: hdrhistogram::Histogram<u64>,
}

/// Err(reason) if the peer cannot run here ("redis" | "rabbitmq" | "nats").
pub fn available(peer: &str) -> Result<(), String> {
    Err(format!(
        "{peer}: not built yet (placeholder for the peers engineer's module)"
    ))
}

/// Runs the workload against `peer`; `progress` gets the records consumed so far.
pub fn run(peer: &str, w: &PeerWorkload, progress: &dyn Fn(u64)) -> Result<PeerResult, String> {
    let _ = (
        w.records,
        w.record_bytes,
        w.consumers,
        w.checkpoint,
        progress,
    );
    Err(format!(
        "{peer}: not built yet (placeholder for the peers engineer's module)"
    ))
}
