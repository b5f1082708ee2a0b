//! Per-shard counters and HdrHistograms, rendered as Prometheus text.
//!
//! Ownership: every shard owns one [`ShardMetrics`] behind its own `Mutex` (so the exporter
//! thread can read it); only that shard writes it, so the lock is uncontended except during a
//! scrape. [`MetricsRegistry`] holds them all and renders the exposition text; [`serve`] answers
//! HTTP GETs on `--metrics-listen` (`metrics.listen`) from a plain thread (no runtime involved):
//! `/metrics` the text, `/ready` and `/live` the health checks operators and orchestrators poll,
//! anything else 404.
//!
//! Exposed (all with a `shard` label):
//! - `lockstep_requests_total{api}`, `lockstep_request_latency_us{api,quantile}` (summary),
//! - `lockstep_bytes_in_total`, `lockstep_bytes_out_total`,
//! - `lockstep_connections_active`, `lockstep_connections_total`, `lockstep_connections_closed_on_error_total`,
//! - `lockstep_fsync_total`, `lockstep_fsync_errors_total`, `lockstep_fsync_latency_us{quantile}`,
//! - `lockstep_log_size_bytes{topic,partition}`, `lockstep_log_end_offset{topic,partition}`,
//! - the KIP's share-transaction metrics: `lockstep_share_transaction_active`,
//!   `lockstep_share_transaction_prepare_time_ms`, `lockstep_share_transaction_commit_time_ms`
//!   (histograms with `le` buckets in milliseconds, so they aggregate across shards and brokers),
//!   `lockstep_share_transaction_abort_total`, `lockstep_share_transaction_timeout_total`.

use crate::constants::{
    METRICS_HISTOGRAM_SIGFIG, METRICS_HTTP_REQUEST_BYTES_MAX, METRICS_LATENCY_US_MAX,
};
use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Quantiles reported for every latency summary.
const QUANTILES: [f64; 4] = [0.5, 0.99, 0.999, 1.0];

/// Upper bounds (milliseconds) of the share-transaction latency histograms' buckets: from one
/// group commit to a transaction timeout's order of magnitude.
const SHARE_TXN_BUCKETS_MS: [u64; 14] = [
    1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000,
];

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, METRICS_LATENCY_US_MAX, METRICS_HISTOGRAM_SIGFIG)
        .expect("constant histogram bounds are valid")
}

/// Latency samples in microseconds (values past the maximum are clamped to it).
#[derive(Clone, Debug)]
pub struct Latency {
    histogram: Histogram<u64>,
    sum_us: u64,
}

impl Default for Latency {
    fn default() -> Self {
        Latency {
            histogram: new_histogram(),
            sum_us: 0,
        }
    }
}

impl Latency {
    pub fn record(&mut self, micros: u64) {
        let clamped = micros.clamp(1, METRICS_LATENCY_US_MAX);
        self.histogram
            .record(clamped)
            .expect("clamped values are within bounds");
        self.sum_us = self.sum_us.saturating_add(micros);
    }

    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    pub fn quantile(&self, q: f64) -> u64 {
        self.histogram.value_at_quantile(q)
    }

    /// Samples at most `micros` (a histogram bucket's cumulative count; exact to the
    /// histogram's precision).
    pub fn count_at_most(&self, micros: u64) -> u64 {
        self.histogram
            .count_between(0, micros.min(METRICS_LATENCY_US_MAX))
    }
}

/// Size of one partition log, refreshed periodically by its shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogGauge {
    pub topic: String,
    pub partition: i32,
    pub size_bytes: u64,
    pub log_end_offset: u64,
}

/// One shard's metrics.
#[derive(Debug, Default)]
pub struct ShardMetrics {
    pub requests: BTreeMap<&'static str, Latency>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub connections_active: u64,
    pub connections_total: u64,
    pub connections_closed_on_error: u64,
    pub fsync: Latency,
    pub fsync_errors: u64,
    pub logs: Vec<LogGauge>,
    /// ONGOING + PREPARE share transactions coordinated by this shard.
    pub share_txn_active: u64,
    pub share_txn_aborted: u64,
    pub share_txn_timed_out: u64,
    /// Prepare and commit latency (phase 1 and phase 2 on the coordinator).
    pub share_txn_prepare: Latency,
    pub share_txn_commit: Latency,
}

impl ShardMetrics {
    pub fn record_request(&mut self, api: &'static str, micros: u64) {
        self.requests.entry(api).or_default().record(micros);
    }
}

/// All shards' metrics, and whether the broker serves (for `/ready`).
#[derive(Debug, Default)]
pub struct MetricsRegistry {
    shards: Vec<Arc<Mutex<ShardMetrics>>>,
    /// Set once recovery is done and every shard accepts connections; cleared when the broker
    /// begins to stop.
    ready: AtomicBool,
}

fn lock(m: &Mutex<ShardMetrics>) -> MutexGuard<'_, ShardMetrics> {
    // A panic while holding the lock leaves plain counters; keep serving them.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl MetricsRegistry {
    /// A registry with one metrics cell per shard.
    pub fn new(shards: usize) -> MetricsRegistry {
        MetricsRegistry {
            shards: (0..shards).map(|_| Arc::default()).collect(),
            ready: AtomicBool::new(false),
        }
    }

    /// Marks the broker ready (every shard serving) or not (starting, or stopping).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The cell of `shard`.
    pub fn shard(&self, shard: usize) -> Arc<Mutex<ShardMetrics>> {
        self.shards[shard].clone()
    }

    /// Prometheus text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let snapshots: Vec<MutexGuard<'_, ShardMetrics>> =
            self.shards.iter().map(|m| lock(m)).collect();
        let counter =
            |out: &mut String, name: &str, help: &str, value: &dyn Fn(&ShardMetrics) -> u64| {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
                for (shard, m) in snapshots.iter().enumerate() {
                    let _ = writeln!(out, "{name}{{shard=\"{shard}\"}} {}", value(m));
                }
            };
        counter(
            &mut out,
            "lockstep_bytes_in_total",
            "Request bytes read.",
            &|m| m.bytes_in,
        );
        counter(
            &mut out,
            "lockstep_bytes_out_total",
            "Response bytes written.",
            &|m| m.bytes_out,
        );
        counter(
            &mut out,
            "lockstep_connections_total",
            "Connections accepted.",
            &|m| m.connections_total,
        );
        counter(
            &mut out,
            "lockstep_connections_closed_on_error_total",
            "Connections closed because of malformed or unsupported requests.",
            &|m| m.connections_closed_on_error,
        );
        counter(
            &mut out,
            "lockstep_fsync_total",
            "Flushes (fdatasync rounds) completed.",
            &|m| m.fsync.count(),
        );
        counter(
            &mut out,
            "lockstep_fsync_errors_total",
            "Flushes that failed.",
            &|m| m.fsync_errors,
        );
        counter(
            &mut out,
            "lockstep_share_transaction_abort_total",
            "Share transactions aborted (on request, by timeout, or at restart).",
            &|m| m.share_txn_aborted,
        );
        counter(
            &mut out,
            "lockstep_share_transaction_timeout_total",
            "ONGOING share transactions aborted by the broker at their timeout.",
            &|m| m.share_txn_timed_out,
        );
        let _ = writeln!(
            out,
            "# HELP lockstep_share_transaction_active ONGOING and PREPARE share transactions.\n# TYPE lockstep_share_transaction_active gauge"
        );
        for (shard, m) in snapshots.iter().enumerate() {
            let _ = writeln!(
                out,
                "lockstep_share_transaction_active{{shard=\"{shard}\"}} {}",
                m.share_txn_active
            );
        }
        for (name, help, pick) in [
            (
                "lockstep_share_transaction_prepare_time_ms",
                "Prepare latency (participants' locks and the PREPARE record durable).",
                (|m: &ShardMetrics| &m.share_txn_prepare) as fn(&ShardMetrics) -> &Latency,
            ),
            (
                "lockstep_share_transaction_commit_time_ms",
                "Commit latency (the COMMITTED record durable).",
                |m: &ShardMetrics| &m.share_txn_commit,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
            for (shard, m) in snapshots.iter().enumerate() {
                let latency = pick(m);
                for le_ms in SHARE_TXN_BUCKETS_MS {
                    let _ = writeln!(
                        out,
                        "{name}_bucket{{shard=\"{shard}\",le=\"{le_ms}\"}} {}",
                        latency.count_at_most(le_ms * 1000)
                    );
                }
                let _ = writeln!(
                    out,
                    "{name}_bucket{{shard=\"{shard}\",le=\"+Inf\"}} {}",
                    latency.count()
                );
                let _ = writeln!(
                    out,
                    "{name}_sum{{shard=\"{shard}\"}} {:.3}",
                    latency.sum_us as f64 / 1000.0
                );
                let _ = writeln!(out, "{name}_count{{shard=\"{shard}\"}} {}", latency.count());
            }
        }
        let _ = writeln!(
            out,
            "# HELP lockstep_connections_active Open client connections.\n# TYPE lockstep_connections_active gauge"
        );
        for (shard, m) in snapshots.iter().enumerate() {
            let _ = writeln!(
                out,
                "lockstep_connections_active{{shard=\"{shard}\"}} {}",
                m.connections_active
            );
        }
        let _ = writeln!(
            out,
            "# HELP lockstep_requests_total Requests handled, by API.\n# TYPE lockstep_requests_total counter"
        );
        for (shard, m) in snapshots.iter().enumerate() {
            for (api, latency) in &m.requests {
                let _ = writeln!(
                    out,
                    "lockstep_requests_total{{shard=\"{shard}\",api=\"{api}\"}} {}",
                    latency.count()
                );
            }
        }
        let summary = |out: &mut String, name: &str, labels: &str, latency: &Latency| {
            for q in QUANTILES {
                let _ = writeln!(
                    out,
                    "{name}{{{labels},quantile=\"{q}\"}} {}",
                    latency.quantile(q)
                );
            }
            let _ = writeln!(out, "{name}_sum{{{labels}}} {}", latency.sum_us);
            let _ = writeln!(out, "{name}_count{{{labels}}} {}", latency.count());
        };
        let _ = writeln!(
            out,
            "# HELP lockstep_request_latency_us Request latency in microseconds, by API.\n# TYPE lockstep_request_latency_us summary"
        );
        for (shard, m) in snapshots.iter().enumerate() {
            for (api, latency) in &m.requests {
                summary(
                    &mut out,
                    "lockstep_request_latency_us",
                    &format!("shard=\"{shard}\",api=\"{api}\""),
                    latency,
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP lockstep_fsync_latency_us Flush (fdatasync) latency in microseconds.\n# TYPE lockstep_fsync_latency_us summary"
        );
        for (shard, m) in snapshots.iter().enumerate() {
            summary(
                &mut out,
                "lockstep_fsync_latency_us",
                &format!("shard=\"{shard}\""),
                &m.fsync,
            );
        }
        for (name, help, value) in [
            (
                "lockstep_log_size_bytes",
                "Bytes of a partition log.",
                (|g: &LogGauge| g.size_bytes) as fn(&LogGauge) -> u64,
            ),
            (
                "lockstep_log_end_offset",
                "Log end offset of a partition.",
                |g: &LogGauge| g.log_end_offset,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (shard, m) in snapshots.iter().enumerate() {
                for g in &m.logs {
                    let _ = writeln!(
                        out,
                        "{name}{{shard=\"{shard}\",topic=\"{}\",partition=\"{}\"}} {}",
                        escape(&g.topic),
                        g.partition,
                        value(g)
                    );
                }
            }
        }
        out
    }
}

/// What an HTTP request on the metrics listener asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    Ready,
    Live,
    NotFound,
    NotGet,
}

fn route(request: &[u8]) -> Route {
    let Some(rest) = request.strip_prefix(b"GET ") else {
        return Route::NotGet;
    };
    let target = rest.split(|&b| b == b' ').next().unwrap_or_default();
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    match path {
        b"/metrics" => Route::Metrics,
        b"/ready" => Route::Ready,
        b"/live" => Route::Live,
        _ => Route::NotFound,
    }
}

fn http_response(status: &str, content_type: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Answers one request: `GET /metrics` the exposition text, `GET /ready` 200 once the broker
/// serves on every shard (503 before and once it stops), `GET /live` 200 while this process
/// answers, any other path 404, any other method 405.
fn respond(request: &[u8], registry: &MetricsRegistry) -> String {
    const TEXT: &str = "text/plain; charset=utf-8";
    match route(request) {
        Route::Metrics => http_response("200 OK", "text/plain; version=0.0.4", &registry.render()),
        Route::Ready if registry.is_ready() => http_response("200 OK", TEXT, "ready\n"),
        Route::Ready => http_response("503 Service Unavailable", TEXT, "not ready\n"),
        Route::Live => http_response("200 OK", TEXT, "live\n"),
        Route::NotFound => http_response(
            "404 Not Found",
            TEXT,
            "not found: the paths are /metrics, /ready and /live\n",
        ),
        Route::NotGet => http_response("405 Method Not Allowed", TEXT, ""),
    }
}

/// Serves HTTP GETs (`respond`) on `listener`, one connection at a time, on the calling
/// thread, until the listener fails.
pub fn serve(listener: TcpListener, registry: Arc<MetricsRegistry>) -> io::Result<()> {
    for stream in listener.incoming() {
        let mut stream = match stream {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "metrics accept failed");
                continue;
            }
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
        let mut request = Vec::new();
        let mut chunk = [0u8; 1024];
        while !request.windows(4).any(|w| w == b"\r\n\r\n")
            && request.len() < METRICS_HTTP_REQUEST_BYTES_MAX
        {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => request.extend_from_slice(&chunk[..n]),
            }
        }
        let _ = stream.write_all(respond(&request, &registry).as_bytes());
    }
    Ok(())
}

/// Binds the metrics listener and serves it on a background thread.
pub fn spawn_server(addr: SocketAddr, registry: Arc<MetricsRegistry>) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new()
        .name("lockstep-metrics".into())
        .spawn(move || {
            if let Err(e) = serve(listener, registry) {
                tracing::error!(error = %e, "metrics server stopped");
            }
        })?;
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_includes_every_family_with_values() {
        let registry = MetricsRegistry::new(2);
        {
            let cell = registry.shard(1);
            let mut m = cell.lock().unwrap();
            m.record_request("Produce", 120);
            m.record_request("Produce", 80);
            m.bytes_in = 1000;
            m.fsync.record(2500);
            m.logs.push(LogGauge {
                topic: "orders".into(),
                partition: 3,
                size_bytes: 4096,
                log_end_offset: 17,
            });
        }
        let text = registry.render();
        assert!(text.contains("lockstep_requests_total{shard=\"1\",api=\"Produce\"} 2"));
        assert!(text.contains("lockstep_bytes_in_total{shard=\"1\"} 1000"));
        assert!(text.contains("lockstep_bytes_in_total{shard=\"0\"} 0"));
        assert!(text.contains("lockstep_request_latency_us_count{shard=\"1\",api=\"Produce\"} 2"));
        assert!(text.contains("lockstep_request_latency_us_sum{shard=\"1\",api=\"Produce\"} 200"));
        assert!(text.contains("lockstep_fsync_total{shard=\"1\"} 1"));
        assert!(text.contains(
            "lockstep_log_size_bytes{shard=\"1\",topic=\"orders\",partition=\"3\"} 4096"
        ));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "bad sample line {line:?}");
        }
    }

    #[test]
    fn latency_clamps_out_of_range_values() {
        let mut l = Latency::default();
        l.record(0);
        l.record(u64::MAX / 4);
        assert_eq!(l.count(), 2);
        assert!(l.quantile(1.0) >= METRICS_LATENCY_US_MAX / 2);
    }

    fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .unwrap();
        let mut body = String::new();
        stream.read_to_string(&mut body).unwrap();
        body
    }

    #[test]
    fn http_endpoint_serves_metrics_health_and_404() {
        let registry = Arc::new(MetricsRegistry::new(1));
        registry.shard(0).lock().unwrap().bytes_out = 42;
        let addr = spawn_server("127.0.0.1:0".parse().unwrap(), registry.clone()).unwrap();
        let body = get(addr, "/metrics");
        assert!(body.starts_with("HTTP/1.1 200 OK"));
        assert!(body.contains("lockstep_bytes_out_total{shard=\"0\"} 42"));
        assert!(get(addr, "/ready").starts_with("HTTP/1.1 503 "));
        assert!(get(addr, "/live").starts_with("HTTP/1.1 200 OK"));
        registry.set_ready(true);
        assert!(get(addr, "/ready?verbose").starts_with("HTTP/1.1 200 OK"));
        for path in ["/", "/metricsx", "/ready/", "/favicon.ico"] {
            assert!(get(addr, path).starts_with("HTTP/1.1 404 "), "{path}");
        }
        registry.set_ready(false);
        assert!(get(addr, "/ready").starts_with("HTTP/1.1 503 "));
    }

    #[test]
    fn share_transaction_latencies_are_cumulative_histograms() {
        let registry = MetricsRegistry::new(2);
        {
            let cell = registry.shard(0);
            let mut m = cell.lock().unwrap();
            for us in [500, 1_500, 7_000, 7_000, 45_000_000] {
                m.share_txn_prepare.record(us);
            }
        }
        let text = registry.render();
        let name = "lockstep_share_transaction_prepare_time_ms";
        assert!(text.contains(&format!("# TYPE {name} histogram")));
        for (le, count) in [
            ("1", 1),
            ("2", 2),
            ("5", 2),
            ("10", 4),
            ("30000", 4),
            ("+Inf", 5),
        ] {
            let line = format!("{name}_bucket{{shard=\"0\",le=\"{le}\"}} {count}");
            assert!(text.contains(&line), "missing {line}");
        }
        assert!(text.contains(&format!("{name}_count{{shard=\"0\"}} 5")));
        assert!(text.contains(&format!("{name}_bucket{{shard=\"1\",le=\"+Inf\"}} 0")));
        // Buckets never decrease.
        let counts: Vec<u64> = text
            .lines()
            .filter(|l| l.starts_with(&format!("{name}_bucket{{shard=\"0\"")))
            .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
            .collect();
        assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
    }
}
