//! Per-shard counters and HdrHistograms, rendered as Prometheus text.
